// GemmSelector: per-shape choice among the candidates of every kernel
// family of the build (cuBLASLt's heuristic candidates, the project's own
// mma kernels where built), by timing them on the device.
//
// A key is (shape M x N x K, operand layouts N/T, output dtype, batch and
// broadcast flags) within an environment (GPU name, compute capability, CUDA
// driver, runtime and cuBLASLt versions). For each key the selector times
// every own config that fits the device's opt-in shared memory (read at run
// time, or an imposed limit) and passes CanImplement, plus cuBLASLt's top-k,
// with CUDA events (median of many runs after warm-up, rotating among input
// copies when they would fit in L2), and keeps the fastest. Choices live in
// memory and in a JSON file, so a restart does not re-tune.
//
// Choose() never blocks on timing: an unknown key gets a heuristic pick at
// once (cuBLASLt's first candidate, else the first own config that fits)
// and, when background tuning is on, is queued for a worker thread that
// times it and replaces the pick. All public methods are thread-safe.
#ifndef MATMUL_KERNELS_CUDA_GEMM_SELECTOR_H_
#define MATMUL_KERNELS_CUDA_GEMM_SELECTOR_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/gemm/gemm_problem.h"
#include "kernels/cuda/cublaslt_gemm.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/gemm_family.h"

namespace matmul::cuda {

struct SelectorOptions {
  int device = 0;
  // JSON file of tuned choices; empty keeps them in memory only.
  std::string cache_path;
  // Tune unknown keys on a worker thread (otherwise they keep the heuristic
  // pick until Tune() is called).
  bool background_tuning = true;
  // Per-block shared memory limit for own configs; 0 reads the device's
  // opt-in limit. Setting 101376 imposes the GB10's limit on any GPU.
  int max_shared_bytes = 0;
  int cublaslt_top_k = CublasLtGemm::kDefaultTopK;
  // Which families the selector may use: the own kernels ("mma") and
  // cuBLASLt ("cublaslt").
  bool use_own_kernels = true;
  bool use_cublaslt = true;
  // Timing effort per candidate: at least min_iterations timed runs, more
  // up to max_iterations while under target_seconds of device time.
  int warmup_iterations = 3;
  int min_iterations = 10;
  int max_iterations = 100;
  double target_seconds = 0.025;
};

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
  static absl::StatusOr<std::unique_ptr<GemmSelector>> Create(
      const SelectorOptions& options);
  // Stops the worker (an in-flight tuning finishes first).
  ~GemmSelector();
  GemmSelector(const GemmSelector&) = delete;
  GemmSelector& operator=(const GemmSelector&) = delete;

  // The selector key of a problem, e.g. "5120x2048x2048:NT:bf16:b1".
  static std::string Key(const GemmProblem& problem);
  // "NVIDIA H200|cc9.0|driver13000|cudart13000|cublaslt130100".
  const std::string& environment() const { return environment_; }
  int device() const { return options_.device; }
  int max_shared_bytes() const { return max_shared_bytes_; }
  // The kernel families of this build, in order of preference for an
  // untimed pick (see gemm_family_registry.h).
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
  // the problem's pointers are not touched), stores the fastest in memory
  // and in the cache file, and returns it. Blocks for the timing.
  // When `timings` is given it receives every candidate's timing.
  absl::StatusOr<KernelChoice> Tune(
      const GemmProblem& problem,
      std::vector<CandidateTiming>* timings = nullptr);

  // Times the candidates for `problem`'s key on private random data and
  // returns every timing (failures included), fastest pick not stored.
  absl::StatusOr<std::vector<CandidateTiming>> TimeCandidates(
      const GemmProblem& problem);

  // Times the given choices interleaved round-robin on the same private
  // data, so that drift affects them alike (matmul-bench's final columns).
  absl::StatusOr<std::vector<CandidateTiming>> TimeChoices(
      const GemmProblem& problem, const std::vector<KernelChoice>& choices);

  // Runs `choice` on `problem` (device pointers) on `stream`; grows
  // `workspace` when the kernel needs more.
  absl::Status RunChoice(const KernelChoice& choice, const GemmProblem& problem,
                         cudaStream_t stream, DeviceBuffer& workspace);

  // Choose(), then a fallback when the chosen kernel cannot take this
  // particular instance (e.g. pointer alignment, a column-major C); leaves
  // nothing to set up on the host for the launch that follows.
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
  // holds all its lanes, so that serving pauses while a key is timed
  // (timings taken beside live traffic are wrong, and slow it down).
  void SetTuningGuard(std::function<std::shared_ptr<void>()> guard);

  // Rewrites the cache file with the current choices (merged with what the
  // file holds for other environments). Called after each tuning.
  absl::Status SaveCache();

  // Number of tuned choices in memory.
  size_t tuned_count() const;

  // Background tunings that stored a choice and that failed, since start
  // (matmul_tuning_total).
  struct TuningCounts {
    int64_t succeeded = 0;
    int64_t failed = 0;
  };
  TuningCounts tuning_counts() const {
    return {tunings_succeeded_.load(std::memory_order_relaxed),
            tunings_failed_.load(std::memory_order_relaxed)};
  }

 private:
  GemmSelector(const SelectorOptions& options, int max_shared_bytes,
               std::string environment,
               std::vector<std::unique_ptr<GemmFamily>> families);

  // Whether the options let the selector use `family`.
  bool Enabled(const GemmFamily& family) const;

  absl::Status LoadCache();
  absl::StatusOr<KernelChoice> Heuristic(const GemmProblem& problem);
  absl::StatusOr<KernelChoice> ChoiceFromName(const std::string& name) const;
  absl::Status CanRun(const KernelChoice& choice, const GemmProblem& problem);
  void WorkerLoop();

  const SelectorOptions options_;
  const int max_shared_bytes_;
  const std::string environment_;
  const std::vector<std::unique_ptr<GemmFamily>> families_;

  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, KernelChoice> choices_;  // guarded by mu_
  std::deque<GemmProblem> queue_;                           // guarded by mu_
  absl::flat_hash_set<std::string> queued_keys_;            // guarded by mu_
  bool worker_busy_ = false;                                // guarded by mu_
  bool stopping_ = false;                                   // guarded by mu_
  std::function<std::shared_ptr<void>()> tuning_guard_;     // guarded by mu_
  std::atomic<int64_t> tunings_succeeded_{0};
  std::atomic<int64_t> tunings_failed_{0};
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  // Serialises timing runs (worker vs. Tune() callers), so two tunings do
  // not share the device and spoil each other's numbers, and file writes.
  std::mutex tune_mu_;
  std::mutex file_mu_;
  std::thread worker_;
};

// The canonical dense problem for `problem`'s key: same shape, layouts,
// dtype, batch and broadcast flags; null pointers; alpha 1, beta 0.
GemmProblem CanonicalProblem(const GemmProblem& problem);

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_GEMM_SELECTOR_H_
