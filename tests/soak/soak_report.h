// The soak's verdict: what ran, what came back, what the daemon looked like
// before and after, and every reason the run failed. Printed as a table and
// written as JSON (--json_out).
#ifndef MATMUL_TESTS_SOAK_SOAK_REPORT_H_
#define MATMUL_TESTS_SOAK_SOAK_REPORT_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/soak/daemon_probe.h"
#include "tests/soak/rss_watch.h"
#include "tests/soak/soak_tally.h"

namespace matmul::soak {

struct SoakReport {
  std::string target;
  int clients = 0;
  double duration_seconds = 0;
  std::string scenarios;
  uint64_t seed = 0;
  // Scenarios asked for but not run, with the reason (no GPU, ...).
  std::vector<std::string> skipped;

  SoakTally::Totals totals;
  int64_t holders_killed = 0;

  int daemon_pid = 0;
  bool same_process = true;  // false: the daemon restarted (or died)
  DaemonSnapshot start;
  DaemonSnapshot end;
  std::optional<int64_t> peak_rss_bytes;
  double settle_seconds = 0;  // waited after the clients were gone
  int64_t fd_slack = 0;

  // /dev/shm objects of the prefix that appeared during the run and are
  // still there: made by this process (a leak), by killed holders (the
  // window between creating a segment and unlinking it after
  // RegisterRegion; removed by the soak after counting), by others.
  std::vector<std::string> shm_left_by_soak;
  std::vector<std::string> shm_left_by_killed_holders;
  std::vector<std::string> shm_left_by_others;

  // The memory rules (rss_watch.h): the bounds, the samples taken while
  // the clients ran (every rss_interval) and what came of them.
  RssRules rss_rules;
  absl::Duration rss_interval;
  std::vector<RssSample> rss_series;
  RssFigures rss;

  // GET /debug/requests (one line per request in flight), fetched when the
  // settle ended with requests in flight or anything not back: its body,
  // or why there is none.
  bool requests_dump_fetched = false;
  std::string requests_dump;
  std::string requests_dump_error;

  // Why the run failed; empty: it passed.
  std::vector<std::string> failures;
};

void PrintReport(const SoakReport& report, std::ostream& out);
std::string ReportJson(const SoakReport& report);

}  // namespace matmul::soak

#endif  // MATMUL_TESTS_SOAK_SOAK_REPORT_H_
