// The one error a compute backend reports that the daemon cannot serve
// past: the device's context is poisoned (an illegal address, a failed
// launch, an uncorrectable ECC error ...), so every later call on it fails
// too, and only a new process gets a working context. The daemon turns
// health to NOT_SERVING, answers what it holds with UNAVAILABLE and exits
// for its supervisor to restart it. Backend-neutral: the server tests for
// it without knowing which backend made it.
#ifndef MATMUL_KERNELS_DEVICE_LOST_H_
#define MATMUL_KERNELS_DEVICE_LOST_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace matmul {

inline constexpr absl::string_view kDeviceLostPayload =
    "type.matmul.dev/device-lost";

// UNAVAILABLE, marked as device-lost (a payload that survives copies of the
// status, not the message, which callers rewrite).
inline absl::Status DeviceLostError(absl::string_view message) {
  absl::Status status = absl::UnavailableError(message);
  status.SetPayload(kDeviceLostPayload, absl::Cord("1"));
  return status;
}

inline bool IsDeviceLost(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable &&
         status.GetPayload(kDeviceLostPayload).has_value();
}

}  // namespace matmul

#endif  // MATMUL_KERNELS_DEVICE_LOST_H_
