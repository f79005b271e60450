// The selector's tuned choices on disk: one JSON file shared by every
// environment (GPU, compute capability, driver and library versions) that
// uses it, each environment's choices in a section of their own:
//
//   {"format": 1, "environments": {"<environment>": {
//     "max_shared_bytes": 232448,
//     "choices": {"<selector key>": {"kernel": "cublaslt_algo0",
//                                    "median_seconds": ...,
//                                    "tuned_at": "..."}}}}}
//
// The kernel names and keys are the selector's (GemmSelector::Key and the
// families' candidate names); this file only stores them.
#ifndef MATMUL_KERNELS_CUDA_SELECTOR_INTERNAL_TUNING_CACHE_H_
#define MATMUL_KERNELS_CUDA_SELECTOR_INTERNAL_TUNING_CACHE_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace matmul::cuda {

// One stored choice.
struct TunedEntry {
  std::string key;     // "5120x2048x2048:NT:bf16:b1"
  std::string kernel;  // "cublaslt_algo0"
  double median_seconds = 0.0;
};

class TuningCache {
 public:
  // A file that holds at most `max_choices` choices of this environment
  // (GemmSelector's max_shape_choices).
  TuningCache(std::string path, std::string environment, size_t max_choices)
      : path_(std::move(path)),
        environment_(std::move(environment)),
        max_choices_(max_choices) {}

  const std::string& path() const { return path_; }

  // The entries stored for this environment; none when the file does not
  // exist yet. DATA_LOSS / FAILED_PRECONDITION for a damaged file or one
  // of another format.
  absl::StatusOr<std::vector<TunedEntry>> Load() const;

  // Rewrites the file with `entries` as this environment's choices (merged
  // with what the file holds, other environments' sections kept: daemons
  // may share the file). Past max_choices, the environment's oldest choices
  // that are not in `entries` are dropped. An entry whose kernel and time
  // are unchanged keeps its date. Written to a sibling file and renamed
  // over the cache, so that a reader (or a crash) never sees half a file.
  // Thread-safe.
  absl::Status Save(int max_shared_bytes,
                    const std::vector<TunedEntry>& entries);

 private:
  const std::string path_;
  const std::string environment_;
  const size_t max_choices_;
  absl::Mutex file_mu_;  // serialises Save()'s read-modify-write
};

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_SELECTOR_INTERNAL_TUNING_CACHE_H_
