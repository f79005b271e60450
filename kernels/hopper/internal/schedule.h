// The persistent grid's work list (gemm_kernel.cuh), on the device and
// on the host (which sizes the workspace from it): tiles done whole, then
// the last round's tiles split along K where that round would leave
// clusters idle, each into as many parts as the idle clusters allow, each
// part at least kMinPartKSteps k-steps long.
#ifndef MATMUL_KERNELS_HOPPER_INTERNAL_SCHEDULE_H_
#define MATMUL_KERNELS_HOPPER_INTERNAL_SCHEDULE_H_

#include "kernels/hopper/internal/tile_shape.h"

#ifdef __CUDACC__
#define MATMUL_HOST_DEVICE __host__ __device__
#else
#define MATMUL_HOST_DEVICE
#endif

namespace matmul::hopper::internal {

struct Schedule {
  int whole;  // tiles done whole: units 0..whole-1
  int parts;  // each later tile's parts (1: no split)
  int units;

  // `tiles` of a cluster each, `clusters` walking them.
  MATMUL_HOST_DEVICE Schedule(int tiles, int clusters, int k_steps, bool split)
      : whole(tiles), parts(1), units(tiles) {
    const int tail = tiles % clusters;
    if (!split || tail == 0) return;
    const int by_clusters = clusters / tail;
    const int by_k = k_steps / kMinPartKSteps;
    const int most = by_clusters < by_k ? by_clusters : by_k;
    if (most < 2) return;
    parts = most;
    whole = tiles - tail;
    units = whole + tail * parts;
  }

  // Split tiles, each needing a slot per part and block of its cluster.
  MATMUL_HOST_DEVICE int split_tiles() const {
    return parts > 1 ? (units - whole) / parts : 0;
  }
};

struct Unit {
  int tile;
  int k_begin, k_end;  // k-steps
  int split;           // which of the split tiles, or -1
  int part;
};

MATMUL_HOST_DEVICE inline Unit UnitOf(const Schedule& s, int unit,
                                      int k_steps) {
  if (unit < s.whole) return {unit, 0, k_steps, -1, 0};
  const int split = (unit - s.whole) / s.parts;
  const int part = (unit - s.whole) % s.parts;
  return {s.whole + split, part * k_steps / s.parts,
          (part + 1) * k_steps / s.parts, split, part};
}

}  // namespace matmul::hopper::internal

#undef MATMUL_HOST_DEVICE

#endif  // MATMUL_KERNELS_HOPPER_INTERNAL_SCHEDULE_H_
