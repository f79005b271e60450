// matmul-soak: many clients against one running daemon for a while, mixing
// checked products with everything a client can do wrong or give up on
// (malformed and oversized requests, cancels, passed deadlines, regions
// unregistered or truncated in use, streams and rings dropped, processes
// killed while they hold sessions, regions and rings). It samples the
// daemon before and after (process identity, RSS, fds, sessions, regions,
// rings, /dev/shm), and its RSS all along (rss_watch.h), and exits non-zero
// on any wrong result, unexpected status, restart, leftover or memory
// growth. tests/soak/run_soak.sh starts a daemon and runs it; see --help.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "client/regions/cuda_memory.h"
#include "client/request_builder.h"
#include "common/flags_help.h"
#include "google/protobuf/stubs/logging.h"
#include "tests/soak/daemon_probe.h"
#include "tests/soak/rss_watch.h"
#include "tests/soak/soak_report.h"
#include "tests/soak/soak_scenarios.h"
#include "tests/soak/soak_tally.h"
#include "tests/soak/soak_worker.h"

ABSL_FLAG(std::string, target, "unix:/run/matmul/matmul.sock",
          "The daemon: unix:/path/to.sock or host:port.");
ABSL_FLAG(int, daemon_pid, 0,
          "The daemon's pid, to check it is the same process at the end and "
          "to read its RSS, fds and mappings from /proc (0: not watched).");
ABSL_FLAG(std::string, metrics, "",
          "host:port of the daemon's /metrics (sessions, regions, rings); "
          "empty: not scraped.");
ABSL_FLAG(std::string, shm_prefix, "matmul",
          "The daemon's --shm_prefix; /dev/shm entries with it are counted.");
ABSL_FLAG(int, clients, 64, "Concurrent client threads.");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(60), "How long to soak.");
ABSL_FLAG(std::string, scenarios, "all",
          "all, or a comma-separated list of scenarios; '-name' removes one "
          "(all,-truncate). Names: product_inline, product_shm, "
          "product_ring, product_stream, malformed, unparseable, "
          "oversized, cancel, "
          "deadline, unregister, truncate, stream_drop, ring_drop, kill, "
          "ring_chaos, ring_kill, shared_weight, shared_kill, product_ipc, "
          "product_vmm, stream_batch (the last three need a GPU: "
          "all,stream_batch adds it).");
ABSL_FLAG(std::string, regions, "shm",
          "Region kinds for checked products: shm, plus ipc and/or vmm "
          "(CUDA memory; skipped with a message when no GPU is usable).");
ABSL_FLAG(int64_t, max_dim, 96, "Checked products draw M, N, K up to this.");
ABSL_FLAG(std::string, holder, "",
          "The soak_holder binary for the kill scenarios (default: beside "
          "this binary).");
ABSL_FLAG(int, max_holders, 8, "Holder processes alive at once.");
ABSL_FLAG(int, steps_per_session, 200,
          "Steps after which a client drops its session and opens another.");
ABSL_FLAG(int64_t, oversized_max_bytes, int64_t{64} << 20,
          "Oversized requests are sent only when the daemon's "
          "max_message_bytes is below this (each is that large).");
ABSL_FLAG(absl::Duration, settle, absl::Seconds(30),
          "How long to wait after the clients are gone for sessions, "
          "regions, rings and fds to return to their start values.");
ABSL_FLAG(int64_t, fd_slack, 0,
          "Open fds the daemon may hold beyond its start value at the end.");
ABSL_FLAG(absl::Duration, watchdog_timeout, absl::Seconds(20),
          "A GetServerInfo that takes longer (one a second) means the "
          "daemon stopped answering.");
ABSL_FLAG(absl::Duration, rss_interval, absl::Seconds(5),
          "How often the daemon's RSS is sampled while the clients run "
          "(shortened so that each growth window holds three samples).");
ABSL_FLAG(double, rss_warmup_fraction, 0.2,
          "The part of --duration before the RSS growth rule starts.");
ABSL_FLAG(absl::Duration, rss_window, absl::Minutes(1),
          "The growth rule compares the mean RSS of the first window after "
          "the warm-up with that of the last one: this long, or a tenth of "
          "what follows the warm-up when that is shorter.");
ABSL_FLAG(matmul::soak::Fraction, rss_max_growth, matmul::soak::Fraction{0.05},
          "Fail when the RSS grows more than this from the first window to "
          "the last (5% or 0.05).");
ABSL_FLAG(absl::Duration, rss_after_load, absl::Seconds(60),
          "How long after the clients are gone the RSS is sampled again "
          "(the settle wait counts).");
ABSL_FLAG(matmul::soak::Fraction, rss_max_after_load,
          matmul::soak::Fraction{0.25},
          "Fail when the RSS --rss_after_load after the load is more than "
          "this above its value before the load.");
ABSL_FLAG(uint64_t, seed, 0, "Random seed (0: from the clock).");
ABSL_FLAG(std::string, json_out, "", "Also write the report here as JSON.");

namespace matmul::soak {
namespace {

struct Baseline {
  DaemonSnapshot snapshot;
  std::set<std::string> shm;
};

// The unparseable scenario serializes invalid UTF-8 on purpose; protobuf
// logs each such message, which would bury the report.
void LogProtobufExceptUtf8(google::protobuf::LogLevel level,
                           const char* filename, int line,
                           const std::string& message) {
  if (absl::StrContains(message, "UTF-8")) return;
  std::cerr << "[libprotobuf " << level << " " << filename << ":" << line
            << "] " << message << "\n";
}

// The scenarios that start soak_holder processes.
constexpr Scenario kHolderScenarios[] = {Scenario::kKill, Scenario::kRingKill,
                                         Scenario::kSharedKill};

std::string DefaultHolderPath(const char* argv0) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string path = n > 0 ? std::string(self, static_cast<size_t>(n)) : argv0;
  const size_t slash = path.rfind('/');
  return (slash == std::string::npos ? std::string(".")
                                     : path.substr(0, slash)) +
         "/soak_holder";
}

// Whether ipc/vmm products can run here: one small allocation of the kind.
absl::Status GpuUsable(CudaMemory::Kind kind) {
  return CudaMemory::Create(kind, 1 << 20).status();
}

// What must be back to its start value; empty when it is.
std::vector<std::string> NotBack(const DaemonSnapshot& start,
                                 const DaemonSnapshot& now, int64_t fd_slack) {
  std::vector<std::string> differences;
  auto compare = [&](const char* name, const auto& a, const auto& b) {
    if (a.has_value() && b.has_value() && *b != *a) {
      differences.push_back(
          absl::StrCat(name, " ", *a, " at the start, ", *b, " at the end"));
    }
  };
  compare("sessions", start.sessions, now.sessions);
  compare("regions", start.regions, now.regions);
  compare("region_bytes", start.region_bytes, now.region_bytes);
  compare("rings", start.rings, now.rings);
  compare("requests_in_flight", start.in_flight, now.in_flight);
  compare("shm_mappings", start.shm_mappings, now.shm_mappings);
  if (start.open_fds.has_value() && now.open_fds.has_value() &&
      *now.open_fds > *start.open_fds + fd_slack) {
    differences.push_back(absl::StrCat("open_fds ", *start.open_fds,
                                       " at the start, ", *now.open_fds,
                                       " at the end (slack ", fd_slack, ")"));
  }
  return differences;
}

int Main(char** argv) {
  const std::string target = absl::GetFlag(FLAGS_target);
  const int clients = absl::GetFlag(FLAGS_clients);
  if (clients < 1) {
    std::cerr << "matmul-soak: --clients must be >= 1\n";
    return 2;
  }
  absl::StatusOr<std::vector<Scenario>> scenarios =
      ParseScenarios(absl::GetFlag(FLAGS_scenarios));
  if (!scenarios.ok()) {
    std::cerr << "matmul-soak: " << scenarios.status().message() << "\n";
    return 2;
  }
  SoakReport report;
  report.target = target;
  report.clients = clients;
  report.fd_slack = absl::GetFlag(FLAGS_fd_slack);
  report.seed = absl::GetFlag(FLAGS_seed);
  if (report.seed == 0) {
    report.seed = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  }
  for (absl::string_view kind :
       absl::StrSplit(absl::GetFlag(FLAGS_regions), ',', absl::SkipEmpty())) {
    if (kind == "shm") continue;  // product_shm and friends
    if (kind != "ipc" && kind != "vmm") {
      std::cerr << "matmul-soak: unknown region kind '" << kind
                << "'; expected shm, ipc or vmm\n";
      return 2;
    }
    scenarios->push_back(kind == "ipc" ? Scenario::kProductIpc
                                       : Scenario::kProductVmm);
  }
  std::vector<Scenario> enabled;
  for (Scenario scenario : *scenarios) {
    if (scenario == Scenario::kProductIpc ||
        scenario == Scenario::kProductVmm ||
        scenario == Scenario::kStreamBatch) {
      const absl::Status usable =
          GpuUsable(scenario == Scenario::kProductVmm ? CudaMemory::Kind::kVmm
                                                      : CudaMemory::Kind::kIpc);
      if (!usable.ok()) {
        const std::string why =
            absl::StrCat(InfoOf(scenario).name, ": no usable GPU here (",
                         usable.ToString(), ")");
        std::cerr << "matmul-soak: skipping " << why << "\n";
        report.skipped.push_back(why);
        continue;
      }
    }
    if (std::find(enabled.begin(), enabled.end(), scenario) == enabled.end()) {
      enabled.push_back(scenario);
    }
  }
  if (enabled.empty()) {
    std::cerr << "matmul-soak: no scenario left to run\n";
    return 2;
  }
  report.scenarios = ScenarioNames(enabled);

  // The monitor's connection stays open from the first sample to the last,
  // so both count it.
  absl::StatusOr<std::unique_ptr<Client>> monitor =
      Client::Create(target, {.wait_for_ready = true});
  if (!monitor.ok()) {
    std::cerr << "matmul-soak: " << monitor.status() << "\n";
    return 2;
  }
  absl::StatusOr<v1::GetServerInfoResponse> info =
      (*monitor)->GetServerInfo(absl::Seconds(30));
  if (!info.ok()) {
    std::cerr << "matmul-soak: GetServerInfo from " << target << ": "
              << info.status() << "\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<DaemonProbe>> probe = DaemonProbe::Create(
      absl::GetFlag(FLAGS_daemon_pid), absl::GetFlag(FLAGS_metrics),
      absl::GetFlag(FLAGS_shm_prefix));
  if (!probe.ok()) {
    std::cerr << "matmul-soak: " << probe.status().message() << "\n";
    return 2;
  }
  report.daemon_pid = (*probe)->pid();
  Baseline baseline;
  baseline.snapshot = (*probe)->Sample();
  for (std::string& name : ShmEntries(absl::GetFlag(FLAGS_shm_prefix))) {
    baseline.shm.insert(std::move(name));
  }
  report.start = baseline.snapshot;
  if (report.daemon_pid != 0 && !baseline.snapshot.alive) {
    std::cerr << "matmul-soak: no process " << report.daemon_pid << "\n";
    return 2;
  }
  if (!baseline.snapshot.metrics_error.empty()) {
    std::cerr << "matmul-soak: " << baseline.snapshot.metrics_error << "\n";
  }

  WorkerOptions options;
  options.target = target;
  options.shm_prefix = absl::GetFlag(FLAGS_shm_prefix);
  options.max_dim = absl::GetFlag(FLAGS_max_dim);
  options.server_max_message_bytes = info->limits().max_message_bytes();
  options.max_holders = absl::GetFlag(FLAGS_max_holders);
  options.steps_per_session = absl::GetFlag(FLAGS_steps_per_session);
  options.holder_path = absl::GetFlag(FLAGS_holder);
  if (options.holder_path.empty()) {
    options.holder_path = DefaultHolderPath(argv[0]);
  }
  const bool needs_holder =
      std::find_first_of(enabled.begin(), enabled.end(),
                         std::begin(kHolderScenarios),
                         std::end(kHolderScenarios)) != enabled.end();
  if (needs_holder && access(options.holder_path.c_str(), X_OK) != 0) {
    std::cerr << "matmul-soak: no holder binary at " << options.holder_path
              << " (--holder)\n";
    return 2;
  }
  if (options.server_max_message_bytes > 0 &&
      options.server_max_message_bytes + 4096 <=
          absl::GetFlag(FLAGS_oversized_max_bytes)) {
    auto oversized = std::make_shared<v1::MatmulRequest>();
    std::mt19937_64 rng(report.seed);
    absl::StatusOr<v1::MatmulRequest> small =
        MakeRandomRequest({.m = 4, .n = 4, .k = 4}, rng);
    if (small.ok()) {
      *oversized = *std::move(small);
      oversized->mutable_a()->mutable_inline_data()->assign(
          static_cast<size_t>(options.server_max_message_bytes + 1024), 'x');
      options.oversized_request = std::move(oversized);
    }
  } else if (std::find(enabled.begin(), enabled.end(), Scenario::kOversized) !=
             enabled.end()) {
    report.skipped.push_back(
        absl::StrCat("oversized requests: the daemon's max_message_bytes (",
                     options.server_max_message_bytes,
                     ") is not below "
                     "--oversized_max_bytes; oversized answers still run"));
  }

  SoakShared shared;
  std::vector<std::unique_ptr<SoakWorker>> workers;
  for (int i = 0; i < clients; ++i) {
    absl::StatusOr<std::unique_ptr<SoakWorker>> worker =
        SoakWorker::Create(options, enabled, shared, i,
                           report.seed + static_cast<uint64_t>(i) * 7919);
    if (!worker.ok()) {
      std::cerr << "matmul-soak: " << worker.status() << "\n";
      return 2;
    }
    workers.push_back(*std::move(worker));
  }

  // The memory rules, and a sampling interval that puts three samples in
  // each growth window.
  RssRules& rss_rules = report.rss_rules;
  rss_rules.warmup_fraction = absl::GetFlag(FLAGS_rss_warmup_fraction);
  rss_rules.max_window = absl::GetFlag(FLAGS_rss_window);
  rss_rules.max_growth = absl::GetFlag(FLAGS_rss_max_growth).value;
  rss_rules.max_after_load = absl::GetFlag(FLAGS_rss_max_after_load).value;
  if (rss_rules.warmup_fraction < 0 || rss_rules.warmup_fraction >= 1) {
    std::cerr << "matmul-soak: --rss_warmup_fraction must be in [0, 1)\n";
    return 2;
  }
  report.rss_interval = absl::GetFlag(FLAGS_rss_interval);
  if (report.rss_interval <= absl::ZeroDuration()) {
    std::cerr << "matmul-soak: --rss_interval must be positive\n";
    return 2;
  }
  const absl::Duration window =
      GrowthWindow(rss_rules, absl::GetFlag(FLAGS_duration));
  if (report.rss_interval > window / 3) {
    report.rss_interval = std::max(window / 3, absl::Milliseconds(250));
  }

  std::cerr << "matmul-soak: " << clients << " clients for "
            << absl::FormatDuration(absl::GetFlag(FLAGS_duration)) << ": "
            << report.scenarios << "\n";
  const absl::Time start = absl::Now();
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (std::unique_ptr<SoakWorker>& worker : workers) {
    threads.emplace_back([&worker, &stop] { worker->Run(stop); });
  }
  // The watchdog: the daemon must stay the same process, and keep
  // answering, all along. (The process first: a dead daemon's socket keeps
  // the monitor's wait-for-ready call waiting for its whole timeout.)
  std::optional<int64_t> peak_rss = baseline.snapshot.rss_bytes;
  bool daemon_lost = false;
  const absl::Time end = start + absl::GetFlag(FLAGS_duration);
  // The RSS series, on a thread of its own: a slow watchdog call must not
  // stretch the interval.
  absl::Notification load_over;
  std::thread rss_sampler;
  if (report.daemon_pid != 0) {
    rss_sampler = std::thread([&] {
      absl::Time next = start + report.rss_interval;
      while (!load_over.WaitForNotificationWithDeadline(next)) {
        const absl::Time now = absl::Now();
        if (std::optional<int64_t> rss = (*probe)->SampleRss()) {
          report.rss_series.push_back({now - start, *rss});
        }
        next = std::max(next + report.rss_interval, now);
      }
    });
  }
  while (absl::Now() < end) {
    absl::SleepFor(std::min(absl::Seconds(1), end - absl::Now()));
    if (report.daemon_pid != 0) {
      DaemonSnapshot now = (*probe)->Sample();
      if (now.rss_bytes.has_value()) {
        peak_rss = std::max(peak_rss.value_or(0), *now.rss_bytes);
      }
      if (!now.alive || now.start_ticks != baseline.snapshot.start_ticks) {
        shared.tally().Fail(
            "watchdog",
            absl::StrCat("daemon pid ", report.daemon_pid, " is gone"));
        daemon_lost = true;
        break;
      }
    }
    absl::StatusOr<v1::GetServerInfoResponse> ping =
        (*monitor)->GetServerInfo(absl::GetFlag(FLAGS_watchdog_timeout));
    if (!ping.ok()) {
      shared.tally().Fail("watchdog", absl::StrCat("GetServerInfo: ",
                                                   ping.status().ToString()));
    }
  }
  // The load ends here; its last RSS sample is taken now.
  const absl::Duration load = absl::Now() - start;
  load_over.Notify();
  if (rss_sampler.joinable()) {
    rss_sampler.join();
    if (std::optional<int64_t> rss = (*probe)->SampleRss()) {
      report.rss_series.push_back({load, *rss});
    }
  }
  stop = true;
  for (std::thread& thread : threads) thread.join();
  workers.clear();  // ends every session, region and ring of the soak
  report.duration_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::cerr << "matmul-soak: clients done after " << report.duration_seconds
            << " s; waiting for the daemon to settle\n";

  const absl::Time settle_start = absl::Now();
  const absl::Time settle_end = settle_start + absl::GetFlag(FLAGS_settle);
  DaemonSnapshot final_snapshot = (*probe)->Sample();
  while (!daemon_lost &&
         !NotBack(baseline.snapshot, final_snapshot, report.fd_slack).empty() &&
         absl::Now() < settle_end) {
    absl::SleepFor(absl::Milliseconds(200));
    final_snapshot = (*probe)->Sample();
  }
  report.settle_seconds = absl::ToDoubleSeconds(absl::Now() - settle_start);
  report.end = final_snapshot;
  if (final_snapshot.rss_bytes.has_value()) {
    peak_rss = std::max(peak_rss.value_or(0), *final_snapshot.rss_bytes);
  }

  // Requests still in flight (or anything not back): what the daemon says
  // they are, from its per-request list.
  if (!daemon_lost &&
      (final_snapshot.in_flight.value_or(0) > 0 ||
       !NotBack(baseline.snapshot, final_snapshot, report.fd_slack).empty())) {
    report.requests_dump_fetched = true;
    absl::StatusOr<std::string> dump =
        (*probe)->Fetch("/debug/requests", absl::Seconds(10));
    if (dump.ok()) {
      report.requests_dump = *std::move(dump);
    } else {
      report.requests_dump_error = dump.status().ToString();
    }
  }

  // The memory a while after the load: the settle counts toward the wait.
  std::optional<int64_t> after_load_rss;
  bool lost_after_load = false;
  absl::Duration after_load_wait = absl::Now() - settle_start;
  if (!daemon_lost && report.daemon_pid != 0) {
    const absl::Time sample_at =
        settle_start + absl::GetFlag(FLAGS_rss_after_load);
    if (absl::Now() < sample_at) {
      std::cerr << "matmul-soak: sampling the daemon's RSS in "
                << absl::FormatDuration(
                       absl::Trunc(sample_at - absl::Now(), absl::Seconds(1)))
                << " (--rss_after_load)\n";
      absl::SleepFor(sample_at - absl::Now());
    }
    const DaemonSnapshot after = (*probe)->Sample();
    after_load_wait = absl::Now() - settle_start;
    if (!after.alive || after.start_ticks != baseline.snapshot.start_ticks) {
      lost_after_load = true;  // reported below as a death or restart
    } else {
      after_load_rss = after.rss_bytes;
    }
  }
  report.rss =
      JudgeRss(rss_rules, baseline.snapshot.rss_bytes, report.rss_series, load,
               after_load_rss, after_load_wait);
  // The watchdog's samples (every second) count toward the peak too.
  if (report.rss.peak.has_value()) {
    peak_rss = std::max(peak_rss.value_or(0), *report.rss.peak);
  }
  report.rss.peak = peak_rss;
  report.peak_rss_bytes = peak_rss;
  report.totals = shared.tally().totals();
  for (const auto& [key, count] : report.totals.outcomes) {
    if (key.second == "killed") {
      report.holders_killed += count;
    }
  }

  // /dev/shm: what appeared and stayed, by who made it.
  const std::string prefix = absl::GetFlag(FLAGS_shm_prefix);
  const std::vector<int> holder_pids = shared.holder_pids();
  const std::set<int> holders(holder_pids.begin(), holder_pids.end());
  for (const std::string& name : ShmEntries(prefix)) {
    if (baseline.shm.contains(name)) continue;
    const std::optional<int> owner = SegmentOwnerPid(name, prefix);
    if (owner == getpid()) {
      report.shm_left_by_soak.push_back(name);
    } else if (owner.has_value() && holders.contains(*owner)) {
      report.shm_left_by_killed_holders.push_back(name);
      shm_unlink(("/" + name).c_str());
    } else {
      report.shm_left_by_others.push_back(name);
    }
  }

  // The verdict.
  if (report.totals.wrong_results > 0) {
    report.failures.push_back(
        absl::StrCat(report.totals.wrong_results, " wrong results"));
  }
  if (report.totals.unexpected > 0) {
    report.failures.push_back(
        absl::StrCat(report.totals.unexpected,
                     " unexpected outcomes (see the first failures)"));
  }
  if (report.daemon_pid != 0) {
    report.same_process =
        final_snapshot.alive && !daemon_lost && !lost_after_load &&
        final_snapshot.start_ticks == baseline.snapshot.start_ticks;
    if (!report.same_process) {
      report.failures.push_back("the daemon died or restarted");
    }
  }
  if (!daemon_lost) {
    for (std::string& difference :
         NotBack(baseline.snapshot, final_snapshot, report.fd_slack)) {
      report.failures.push_back(absl::StrCat(
          "not back after ", absl::FormatDuration(absl::GetFlag(FLAGS_settle)),
          ": ", difference));
    }
  }
  if (!report.shm_left_by_soak.empty()) {
    report.failures.push_back(absl::StrCat(
        report.shm_left_by_soak.size(), " /dev/shm entries left by the soak"));
  }
  for (const std::string& failure : report.rss.failures) {
    report.failures.push_back(failure);
  }

  PrintReport(report, std::cout);
  if (const std::string path = absl::GetFlag(FLAGS_json_out); !path.empty()) {
    std::ofstream json(path);
    json << ReportJson(report);
    if (!json) {
      std::cerr << "matmul-soak: could not write " << path << "\n";
      return 1;
    }
  }
  return report.failures.empty() ? 0 : 1;
}

}  // namespace
}  // namespace matmul::soak

int main(int argc, char** argv) {
  // As in the daemon: Debian's abseil checks every lock for deadlocks,
  // through one process-wide lock that 64 clients would queue on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::SetProgramUsageMessage(
      "Soaks a running matmul daemon with many misbehaving clients and "
      "checks it is unharmed.\n\n"
      "  matmul-soak --target=unix:/tmp/s.sock --daemon_pid=PID "
      "--metrics=127.0.0.1:9466 --duration=60s\n\n"
      "tests/soak/run_soak.sh starts a daemon and runs this against it.");
  matmul::HelpListsFlagsFrom("soak_main.cc");
  google::protobuf::SetLogHandler(&matmul::soak::LogProtobufExceptUtf8);
  // SIGPIPE from a peer that went away must not end the soak.
  signal(SIGPIPE, SIG_IGN);
  absl::ParseCommandLine(argc, argv);
  return matmul::soak::Main(argv);
}
