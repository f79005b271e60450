#include "server/admission/client_quota.h"

#include "absl/strings/str_cat.h"

namespace matmul {

absl::Status ClientQuota::Acquire(const std::string& client) {
  if (max_in_flight_ <= 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  int& count = in_flight_[client];
  if (count >= max_in_flight_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("this client (", client, ") has ", count,
                     " requests in flight already, the most one client may "
                     "(--max_in_flight_per_client); wait for some to finish"));
  }
  ++count;
  return absl::OkStatus();
}

void ClientQuota::Release(const std::string& client) {
  if (max_in_flight_ <= 0) return;
  absl::MutexLock lock(&mu_);
  auto it = in_flight_.find(client);
  if (it == in_flight_.end()) return;
  if (--it->second <= 0) in_flight_.erase(it);
}

int ClientQuota::in_flight(const std::string& client) const {
  absl::MutexLock lock(&mu_);
  auto it = in_flight_.find(client);
  return it == in_flight_.end() ? 0 : it->second;
}

}  // namespace matmul
