// Requests in flight per client: one client that floods the daemon fills
// its own share, not the queue every client shares, so the others' requests
// still find room and wait behind at most that share.
#ifndef MATMUL_SERVER_ADMISSION_CLIENT_QUOTA_H_
#define MATMUL_SERVER_ADMISSION_CLIENT_QUOTA_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace matmul {

class ClientQuota {
 public:
  // `max_in_flight` <= 0: unlimited.
  explicit ClientQuota(int max_in_flight) : max_in_flight_(max_in_flight) {}

  // Takes one place for `client`; RESOURCE_EXHAUSTED when it holds
  // max_in_flight already. Each OK is matched by one Release.
  absl::Status Acquire(const std::string& client);
  void Release(const std::string& client);

  int in_flight(const std::string& client) const;

 private:
  const int max_in_flight_;
  mutable absl::Mutex mu_;
  // Only clients with requests in flight have an entry.
  absl::flat_hash_map<std::string, int> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace matmul

#endif  // MATMUL_SERVER_ADMISSION_CLIENT_QUOTA_H_
