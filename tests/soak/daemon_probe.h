// What the soak watches on the daemon from outside: the process itself
// (/proc/<pid>: identity, RSS, open fds, shm mappings), its Prometheus
// endpoint (sessions, regions, rings) and the shm objects left in /dev/shm.
// Every source is optional: a family the daemon does not export yet, or a
// pid that was not given, reads as absent rather than failing the sample.
#ifndef MATMUL_TESTS_SOAK_DAEMON_PROBE_H_
#define MATMUL_TESTS_SOAK_DAEMON_PROBE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace matmul::soak {

struct DaemonSnapshot {
  // From /proc/<pid>; absent without a pid.
  bool alive = false;
  // Clock ticks after boot at which the process started: with the pid, it
  // tells one process from a restarted one that got the same pid.
  std::optional<uint64_t> start_ticks;
  std::optional<int64_t> rss_bytes;
  std::optional<int64_t> open_fds;
  // Lines of /proc/<pid>/maps that map a /dev/shm object of the prefix:
  // shm regions and request rings the daemon holds (a fallback for
  // daemons that export no region gauge).
  std::optional<int64_t> shm_mappings;

  // From /metrics; absent when the family is not exported (or the scrape
  // failed, which `metrics_error` says).
  std::string metrics_error;
  std::optional<double> sessions;      // matmul_sessions
  std::optional<double> regions;       // matmul_regions{kind=...}, summed
  std::optional<double> region_bytes;  // matmul_region_bytes{...}, summed
  std::optional<double> rings;         // matmul_rings_attached
  std::optional<double> in_flight;     // matmul_requests_in_flight
};

class DaemonProbe {
 public:
  // `pid` 0: no /proc sampling. `metrics_address` "host:port" or empty (no
  // scrapes). INVALID_ARGUMENT for an address without a port.
  static absl::StatusOr<std::unique_ptr<DaemonProbe>> Create(
      int pid, std::string metrics_address, std::string shm_prefix);

  DaemonSnapshot Sample() const;
  // Only the RSS (cheap: one read of /proc/<pid>/status); absent without a
  // pid or once the process is gone.
  std::optional<int64_t> SampleRss() const;
  int pid() const { return pid_; }

  // The body of GET `path` from the metrics endpoint (see ScrapeMetrics);
  // FAILED_PRECONDITION without a metrics address.
  absl::StatusOr<std::string> Fetch(const std::string& path,
                                    absl::Duration timeout) const;

 private:
  DaemonProbe(int pid, std::string host, std::string port,
              std::string shm_prefix)
      : pid_(pid),
        host_(std::move(host)),
        port_(std::move(port)),
        shm_prefix_(std::move(shm_prefix)) {}

  const int pid_;
  const std::string host_;
  const std::string port_;
  const std::string shm_prefix_;
};

// The body of GET `path` (/metrics, /debug/requests) from host:port
// (HTTP/1.0, read to EOF), bounded by `timeout` for connecting and for each
// read. UNAVAILABLE when it cannot be fetched; NOT_FOUND for a 404; the
// status line in the message for any other answer than 200.
absl::StatusOr<std::string> ScrapeMetrics(const std::string& host,
                                          const std::string& port,
                                          absl::Duration timeout,
                                          const std::string& path = "/metrics");

// Sum of every sample of family `name` in a Prometheus text scrape
// ("name value" and "name{labels} value" lines); absent when none.
std::optional<double> SumOfFamily(absl::string_view scrape,
                                  absl::string_view name);

// Names (without "/dev/shm/") of the shm objects that start with `prefix`.
std::vector<std::string> ShmEntries(absl::string_view prefix);

// The pid a client named a segment after: "<prefix>-<pid>-<pid namespace>-
// <hex>" (the C++ client, client/regions/segment_names.h),
// "<prefix>-<pid>-<hex>" (the C++ client before it named the namespace) or
// "<prefix>-py<pid>-..." (the Python client). Absent for other names.
std::optional<int> SegmentOwnerPid(absl::string_view name,
                                   absl::string_view prefix);

}  // namespace matmul::soak

#endif  // MATMUL_TESTS_SOAK_DAEMON_PROBE_H_
