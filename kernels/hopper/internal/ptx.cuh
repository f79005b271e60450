// The sm_90a instructions the Hopper kernel uses, as inline PTX: mbarriers,
// TMA loads (also multicast to a cluster) and stores, cluster barriers,
// wgmma shared-memory descriptors and wgmma itself.
#ifndef MATMUL_KERNELS_HOPPER_INTERNAL_PTX_CUH_
#define MATMUL_KERNELS_HOPPER_INTERNAL_PTX_CUH_

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace matmul::hopper::internal {

#include "kernels/hopper/internal/wgmma_m64n128k16.inc"
#include "kernels/hopper/internal/wgmma_m64n256k16.inc"

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void BarrierInit(uint64_t* bar, int count) {
  asm volatile(
      "mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SharedAddress(bar)),
      "r"(count));
}

__device__ __forceinline__ void BarrierExpectTx(uint64_t* bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   SharedAddress(bar)),
               "r"(bytes));
}

__device__ __forceinline__ void BarrierArrive(uint64_t* bar) {
  asm volatile(
      "mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(SharedAddress(bar)));
}

__device__ __forceinline__ void BarrierWait(uint64_t* bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(SharedAddress(bar)),
      "r"(parity));
}

// Arrives at the barrier at the same shared-memory offset in cluster block
// `rank`. The default (CTA-scope) release suffices: what it orders is the
// completion of this block's wgmma reads of the peer's stage, and a
// cluster-scope release costs a memory barrier on every stage.
__device__ __forceinline__ void ClusterBarrierArrive(uint64_t* bar, int rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(remote)
               : "r"(SharedAddress(bar)), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote)
               : "memory");
}

// Every thread of every block of the cluster.
__device__ __forceinline__ void ClusterSync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
}

// The threads of named barrier `id` (1..15; 0 is __syncthreads).
__device__ __forceinline__ void NamedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Loads the box at (c0, c1) of matrix c2 of a batch (3-D map) into `dst`,
// completing its bytes on `bar`.
__device__ __forceinline__ void TmaLoad3d(void* dst, const CUtensorMap* map,
                                          uint64_t* bar, int c0, int c1,
                                          int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::"
      "bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(SharedAddress(dst)),
      "l"(map), "r"(SharedAddress(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// Loads one box into the same shared-memory offset of every block in
// `mask`, completing bytes on each one's barrier at `bar`'s offset.
__device__ __forceinline__ void TmaLoad3dMulticast(void* dst,
                                                   const CUtensorMap* map,
                                                   uint64_t* bar, int c0,
                                                   int c1, int c2,
                                                   uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::"
      "bytes.multicast::cluster [%0], [%1, {%3, %4, %5}], [%2], %6;\n" ::"r"(
          SharedAddress(dst)),
      "l"(map), "r"(SharedAddress(bar)), "r"(c0), "r"(c1), "r"(c2), "h"(mask)
      : "memory");
}

// One box from shared memory out to global memory, as its own bulk group;
// the copy engine drops what falls outside the tensor.
__device__ __forceinline__ void TmaStore3d(const CUtensorMap* map,
                                           const void* src, int c0, int c1,
                                           int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, "
      "%4}], [%1];\n" ::"l"(map),
      "r"(SharedAddress(src)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Until at most kPending of this thread's bulk stores still read shared
// memory.
template <int kPending>
__device__ __forceinline__ void TmaStoreWaitRead() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending)
               : "memory");
}

// Until this thread's bulk stores are complete.
__device__ __forceinline__ void TmaStoreWaitAll() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// Makes this thread's shared-memory writes visible to the copy engine.
__device__ __forceinline__ void FenceSharedForTma() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// wgmma's view of an operand tile in shared memory, 128-byte swizzled as
// TMA writes it (rows of 128 bytes, 8-row groups of 1024 bytes).
// K-major: each row holds 64 K-elements of one M (or N) index; the 8-row
// groups follow each other along M (N).
__device__ __forceinline__ uint64_t KMajorDescriptor(const void* p) {
  const uint64_t address = SharedAddress(p);
  uint64_t desc = (address & 0x3FFFF) >> 4;
  desc |= uint64_t{1} << 16;          // leading byte offset (unused: swizzled)
  desc |= uint64_t{1024 >> 4} << 32;  // stride byte offset: 8 rows
  desc |= uint64_t{1} << 62;          // 128-byte swizzle
  return desc;
}

// MN-major: each row holds 64 M (N) elements of one K index, 8-row groups
// follow each other along K, and each further 64 M (N) elements start
// `mn_block_bytes` later.
__device__ __forceinline__ uint64_t MnMajorDescriptor(const void* p,
                                                      int mn_block_bytes) {
  const uint64_t address = SharedAddress(p);
  uint64_t desc = (address & 0x3FFFF) >> 4;
  desc |= uint64_t(mn_block_bytes >> 4) << 16;  // leading: the next 64 M/N
  desc |= uint64_t{1024 >> 4} << 32;            // stride: the next 8 K
  desc |= uint64_t{1} << 62;                    // 128-byte swizzle
  return desc;
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Until at most kPending of this warpgroup's wgmma groups are running.
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending)
               : "memory");
}

// Moves registers between the warpgroups of a block (setmaxnreg).
template <int kRegisters>
__device__ __forceinline__ void GiveUpRegisters() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

template <int kRegisters>
__device__ __forceinline__ void TakeRegisters() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

}  // namespace matmul::hopper::internal

#endif  // MATMUL_KERNELS_HOPPER_INTERNAL_PTX_CUH_
