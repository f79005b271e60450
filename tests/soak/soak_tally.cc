#include "tests/soak/soak_tally.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace matmul::soak {
namespace {

// Enough to diagnose; a broken daemon could otherwise fill memory with
// copies of the same message.
constexpr size_t kMaxFailureMessages = 50;

}  // namespace

std::string CodeName(absl::StatusCode code) {
  return absl::AsciiStrToLower(absl::StatusCodeToString(code));
}

bool SoakTally::Record(absl::string_view scenario, absl::string_view what,
                       const absl::Status& status, Expected expected) {
  const bool allowed = std::find(expected.begin(), expected.end(),
                                 status.code()) != expected.end();
  absl::MutexLock lock(&mu_);
  ++totals_.outcomes[{std::string(scenario), CodeName(status.code())}];
  if (!allowed) {
    ++totals_.unexpected;
    AddFailure(
        absl::StrCat(scenario, ": ", what, ": unexpected ", status.ToString()));
  }
  return allowed;
}

void SoakTally::Count(absl::string_view scenario, absl::string_view outcome) {
  absl::MutexLock lock(&mu_);
  ++totals_.outcomes[{std::string(scenario), std::string(outcome)}];
}

void SoakTally::RecordCheck(absl::string_view scenario, absl::string_view what,
                            const absl::Status& check, double relative_error,
                            double tolerance) {
  absl::MutexLock lock(&mu_);
  // NaN compares false, so a NaN error is wrong too.
  if (check.ok() && relative_error < tolerance) {
    ++totals_.checked_products;
    return;
  }
  ++totals_.wrong_results;
  ++totals_.outcomes[{std::string(scenario), "wrong_result"}];
  AddFailure(absl::StrCat(scenario, ": ", what, ": WRONG RESULT: ",
                          check.ok()
                              ? absl::StrCat("relative error ", relative_error,
                                             " (tolerance ", tolerance, ")")
                              : check.ToString()));
}

void SoakTally::Fail(absl::string_view scenario, absl::string_view message) {
  absl::MutexLock lock(&mu_);
  ++totals_.unexpected;
  ++totals_.outcomes[{std::string(scenario), "failure"}];
  AddFailure(absl::StrCat(scenario, ": ", message));
}

void SoakTally::AddFailure(std::string message) {
  if (totals_.failures.size() < kMaxFailureMessages) {
    totals_.failures.push_back(std::move(message));
  }
}

SoakTally::Totals SoakTally::totals() const {
  absl::MutexLock lock(&mu_);
  return totals_;
}

}  // namespace matmul::soak
