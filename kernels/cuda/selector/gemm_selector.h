// GemmSelector: the choice policy. Per selector key (selector_key.h) it
// picks one kernel among the candidates of every kernel family of the build
// (gemm_family_registry.h: cuBLASLt's heuristic candidates, the project's
// own mma kernels where built) by timing them on the device, within an
// environment (GPU name, compute capability, CUDA driver, runtime and
// cuBLASLt versions, whether the mma family is there).
//
// Tuning a key times every candidate that passes CanImplement (own configs
// only within the device's opt-in shared memory, or an imposed limit) with
// CUDA events (candidate_timer.h: median of many runs after warm-up, on
// private operands rotated so they do not sit in L2) and keeps the fastest
// (an own kernel only where it beats cuBLASLt by a margin: finalist_pick.h).
// Choices live in memory and in a JSON file (tuning_cache.h), so a restart
// does not re-tune; both hold the most recently used
// SelectorOptions::max_shape_choices keys.
//
// Choose() never blocks on timing: an unknown key gets a heuristic pick at
// once (cuBLASLt's first candidate, else the own config whose tiles best
// fill the device) and, when background tuning is on, is queued for a worker
// thread (background_tuner.h) that times it and replaces the pick. All public
// methods are thread-safe.
#ifndef MATMUL_KERNELS_CUDA_SELECTOR_GEMM_SELECTOR_H_
#define MATMUL_KERNELS_CUDA_SELECTOR_GEMM_SELECTOR_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/gemm/gemm_problem.h"
#include "kernels/cuda/families/cublaslt_gemm.h"
#include "kernels/cuda/families/gemm_family.h"
#include "kernels/cuda/runtime/cuda_resources.h"
#include "kernels/cuda/selector/candidate_timer.h"
#include "kernels/cuda/selector/internal/background_tuner.h"
#include "kernels/cuda/selector/internal/lru_map.h"
#include "kernels/cuda/selector/internal/selector_key.h"
#include "kernels/cuda/selector/internal/tuning_cache.h"
#include "kernels/cuda/selector/selector_options.h"

namespace matmul::cuda {

// The timing of one candidate on one key.
struct CandidateTiming {
  KernelChoice choice;
  std::string group;        // GemmCandidate::group: "mma_128x256", "cublaslt"
  int shared_bytes = 0;     // GemmCandidate::shared_bytes
  bool fits_spark = false;  // GemmCandidate::fits_spark
  absl::Status status;      // not OK: could not run (then no times)
  double median_seconds = 0.0;
  double min_seconds = 0.0;
  double max_seconds = 0.0;
  int iterations = 0;
};

class GemmSelector {
 public:
  // A selector for CUDA device `device`.
  static absl::StatusOr<std::unique_ptr<GemmSelector>> Create(
      int device, const SelectorOptions& options);
  // Stops the worker (an in-flight tuning finishes first).
  ~GemmSelector();
  GemmSelector(const GemmSelector&) = delete;
  GemmSelector& operator=(const GemmSelector&) = delete;

  // The selector key of a problem, e.g. "5120x2048x2048:NT:bf16:b1" (see
  // SelectorKey).
  static std::string Key(const GemmProblem& problem) {
    return SelectorKey(problem);
  }
  // "NVIDIA H200|cc9.0|driver13000|cudart13000|cublaslt130100|mma".
  const std::string& environment() const { return environment_; }
  int device() const { return device_; }
  int max_shared_bytes() const { return max_shared_bytes_; }
  // The kernel families of this build, in the order their candidates are
  // listed and timed (see gemm_family_registry.h).
  const std::vector<std::unique_ptr<GemmFamily>>& families() const {
    return families_;
  }
  // The most workspace any family asks for up front (see
  // GemmFamily::MaxWorkspaceBytes).
  size_t max_workspace_bytes() const;

  // The kernel to use for `problem`: the tuned pick when known, else a
  // heuristic one (queued for background tuning). Does no GPU work beyond
  // a cuBLASLt heuristic query.
  absl::StatusOr<KernelChoice> Choose(const GemmProblem& problem);

  // Times every candidate for `problem`'s key now (on private random data;
  // the problem's pointers are not touched), then the best of each group
  // again, interleaved (TimeChoices); stores the fastest of those in memory
  // and in the cache file, and returns it. Blocks for the timing.
  // When `timings` is given it receives every candidate's first timing.
  absl::StatusOr<KernelChoice> Tune(
      const GemmProblem& problem,
      std::vector<CandidateTiming>* timings = nullptr);

  // Times the candidates for `problem`'s key on private random data and
  // returns every timing (failures included), fastest pick not stored.
  absl::StatusOr<std::vector<CandidateTiming>> TimeCandidates(
      const GemmProblem& problem);

  // Times the given choices interleaved, in a random order each round, on
  // the same private data, so that drift affects them alike (matmul-bench's
  // final columns).
  absl::StatusOr<std::vector<CandidateTiming>> TimeChoices(
      const GemmProblem& problem, const std::vector<KernelChoice>& choices);

  // Choose(), then a fallback when the chosen kernel cannot take this
  // particular instance (e.g. pointer alignment, a column-major C); leaves
  // nothing to set up on the host for the launch that follows. The caller
  // runs it (families/run_choice.h).
  absl::StatusOr<KernelChoice> Resolve(const GemmProblem& problem);

  // Resolve() + RunChoice(); when the chosen kernel cannot take this
  // particular instance (e.g. pointer alignment), falls back to another that
  // can. Returns what ran.
  absl::StatusOr<KernelChoice> Run(const GemmProblem& problem,
                                   cudaStream_t stream,
                                   DeviceBuffer& workspace);

  // Blocks until the background queue is empty and idle (tests, tools).
  void WaitForBackgroundTuning();

  // Called by the background worker around each key it times; what it
  // returns is held for the timing. The CUDA backend passes a guard that
  // holds all its stream slots, so that serving pauses while a key is timed
  // (timings taken beside live traffic are wrong, and slow it down).
  void SetTuningGuard(std::function<std::shared_ptr<void>()> guard);

  // Rewrites the cache file with the current choices (merged with what the
  // file holds for other environments). Called after each tuning.
  absl::Status SaveCache();

  // Number of tuned choices in memory.
  size_t tuned_count() const;

  // Background tunings that stored a choice and that failed, since start
  // (matmul_tuning_total).
  using TuningCounts = BackgroundTuner::Counts;
  TuningCounts tuning_counts() const;

 private:
  GemmSelector(int device, const SelectorOptions& options, int max_shared_bytes,
               std::string environment,
               std::vector<std::unique_ptr<GemmFamily>> families);

  // Whether the options let the selector use `family`.
  bool Enabled(const GemmFamily& family) const;
  absl::Status LoadCache();
  absl::StatusOr<KernelChoice> Heuristic(const GemmProblem& problem);
  absl::StatusOr<KernelChoice> ChoiceFromName(const std::string& name) const;
  absl::Status CanRun(const KernelChoice& choice, const GemmProblem& problem);
  TimingEffort Effort() const;

  const int device_;
  const SelectorOptions options_;
  const int max_shared_bytes_;
  const std::string environment_;
  const std::vector<std::unique_ptr<GemmFamily>> families_;
  TuningCache cache_;

  mutable absl::Mutex mu_;
  // By key; at most options_.max_shape_choices.
  LruMap<KernelChoice> choices_ ABSL_GUARDED_BY(mu_);
  // Serialises timing runs (worker vs. Tune() callers), so two tunings do
  // not share the device and spoil each other's numbers.
  absl::Mutex tune_mu_;
  // Last member: its worker calls Tune(), so it stops before the rest goes.
  std::unique_ptr<BackgroundTuner> tuner_;
};

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_SELECTOR_GEMM_SELECTOR_H_
