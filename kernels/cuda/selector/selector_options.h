// How a GemmSelector chooses and times kernels. CUDA-free, so that the
// daemon's flags can fill it without the CUDA headers (server/backends).
#ifndef MATMUL_KERNELS_CUDA_SELECTOR_SELECTOR_OPTIONS_H_
#define MATMUL_KERNELS_CUDA_SELECTOR_SELECTOR_OPTIONS_H_

#include <string>

namespace matmul::cuda {

struct SelectorOptions {
  // JSON file of tuned choices (--tuning_cache); empty keeps them in memory
  // only.
  std::string tuning_cache;
  // Tune unknown keys on a worker thread (otherwise they keep the heuristic
  // pick until Tune() is called).
  bool background_tuning = true;
  // Keys whose choice is kept, in memory and in the cache file
  // (--max_shape_choices): beyond it the least recently used is forgotten,
  // and re-tuned when it comes back. Bounds what clients sending ever-new
  // shapes cost the daemon.
  int max_shape_choices = 4096;
  // Keys waiting for background tuning: a new key met while the queue is
  // full runs on its heuristic pick, keeps nothing, and is queued when met
  // again.
  int max_queued_tunings = 256;
  // Per-block shared memory limit for own configs; 0 reads the device's
  // opt-in limit. Setting 101376 imposes the GB10's limit on any GPU.
  int max_shared_bytes = 0;
  // cuBLASLt heuristic results timed per key; the default is
  // CublasLtGemm::kDefaultTopK (checked where both are seen).
  static constexpr int kDefaultCublasLtTopK = 8;
  int cublaslt_top_k = kDefaultCublasLtTopK;
  // Which families the selector may use: the own kernels ("mma",
  // "hopper") and cuBLASLt ("cublaslt"). Turning one off is for tests and
  // for ruling a family out in production.
  bool use_own_kernels = true;
  bool use_cublaslt = true;
  // Timing effort per candidate: at least min_iterations timed runs, more
  // up to max_iterations while under target_seconds of device time.
  int warmup_iterations = 3;
  int min_iterations = 10;
  int max_iterations = 100;
  double target_seconds = 0.025;
  // How much faster than cuBLASLt's finalist an own kernel must time to be
  // picked over it (finalist_pick.h); 0.02 = 2%.
  double own_kernel_margin = 0.02;
};

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_SELECTOR_SELECTOR_OPTIONS_H_
