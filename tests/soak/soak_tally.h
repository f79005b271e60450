// The soak's ledger: every outcome counted by (scenario, status code), and
// the outcomes that fail the run: a status the scenario does not allow, a
// product answered OK with a wrong result, or anything else a scenario
// reports as broken. Thread-safe; the worker threads share one.
#ifndef MATMUL_TESTS_SOAK_SOAK_TALLY_H_
#define MATMUL_TESTS_SOAK_SOAK_TALLY_H_

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace matmul::soak {

// The codes a scenario accepts for one call.
using Expected = std::initializer_list<absl::StatusCode>;

class SoakTally {
 public:
  struct Totals {
    // (scenario, code name) -> count. Code names are lower case
    // ("ok", "invalid_argument"); the soak's own outcomes ("killed",
    // "wrong_result", "skipped") share the map.
    std::map<std::pair<std::string, std::string>, int64_t> outcomes;
    int64_t wrong_results = 0;
    int64_t unexpected = 0;  // statuses outside Expected, other failures
    int64_t checked_products = 0;
    // The first failures, with their messages (the rest are only counted).
    std::vector<std::string> failures;
  };

  // Counts `status` under `scenario`; a code outside `expected` is a
  // failure, reported with `what` (the call that gave it). Returns whether
  // it was expected.
  bool Record(absl::string_view scenario, absl::string_view what,
              const absl::Status& status, Expected expected);
  // An outcome that is no status ("killed", "skipped").
  void Count(absl::string_view scenario, absl::string_view outcome);
  // A product answered OK: counts a checked product, or a wrong result
  // when `relative_error` is not below `tolerance` (NaN included) or the
  // check itself failed (`check` not OK: the answer lacked its C).
  void RecordCheck(absl::string_view scenario, absl::string_view what,
                   const absl::Status& check, double relative_error,
                   double tolerance);
  // Anything else that is broken.
  void Fail(absl::string_view scenario, absl::string_view message);

  Totals totals() const;

 private:
  void AddFailure(std::string message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  Totals totals_ ABSL_GUARDED_BY(mu_);
};

// "ok", "invalid_argument", ...
std::string CodeName(absl::StatusCode code);

}  // namespace matmul::soak

#endif  // MATMUL_TESTS_SOAK_SOAK_TALLY_H_
