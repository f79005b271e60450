// matmul-cli: asks a matmul daemon what it is (`info`) or whether it serves
// (`health`, grpc.health.v1: the probe of the container and Kubernetes
// manifests in deploy/), runs a random product through it, timed and
// optionally checked against the FP64 reference (`run`), or loads it at
// several concurrency levels (`bench`).
// Exit codes: 0 ok, 1 RPC or check failure (or not serving), 2 usage.
// This file: the usage text, --help, and the dispatch to the subcommands
// (matmul_cli_{info,health,run,bench}.cc); the flags are in
// matmul_cli_flags.cc.
#include <algorithm>
#include <iostream>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "client/cli/exit_codes.h"
#include "client/cli/matmul_cli_bench.h"
#include "client/cli/matmul_cli_flags.h"
#include "client/cli/matmul_cli_health.h"
#include "client/cli/matmul_cli_info.h"
#include "client/cli/matmul_cli_run.h"
#include "common/flags_help.h"

namespace matmul::cli {
namespace {

constexpr char kUsage[] = R"(a command-line client for the matmul daemon.

Usage:
  matmul-cli info [--target=ADDR] [--json]
  matmul-cli health [--target=ADDR] [--timeout=DURATION]
  matmul-cli run  [--target=ADDR] [--shape=MxNxK] [--transpose_a]
                  [--transpose_b] [--batch=N [--broadcast_a] [--broadcast_b]]
                  [--alpha=F] [--beta=F] [--out_dtype=bf16|fp32]
                  [--iterations=N] [--check [--tolerance=F]] [--seed=S]
                  [--mode=inline|shm|ipc|vmm [--ring]] [--timeout=DURATION]
                  [--json]
  matmul-cli bench [--target=ADDR] [--shape=MxNxK] [--transpose_b]
                  [--mode=inline|shm|ipc|vmm] [--concurrency=1,4,16,64]
                  [--request_rate=R] [--duration=2s | --requests=N]
                  [--json | --csv] [--save=FILE.json] [--label=NAME]

Subcommands:
  info  Prints the daemon's version, backend, devices, limits and dtypes
        (GetServerInfo).
  health
        Asks the daemon's grpc.health.v1 service whether it serves: prints
        SERVING and exits 0 when it does; exits 1, saying why, when nothing
        answers at ADDR or the daemon is NOT_SERVING (draining on SIGTERM,
        or stopped serving after a device fault). For container and
        Kubernetes probes: matmul-cli health --timeout=3s.
  run   Sends a product of random BF16 operands and prints the wall-clock
        latency around the RPC, GFLOP/s, the server's own queue/kernel/total
        times, and the backend and kernel that ran. --check recomputes it
        with the FP64 reference and prints the relative error and PASS/FAIL.
        --mode=shm puts A, B and C in a registered shared-memory region
        (zero-copy; the daemon must be on this host); --mode=ipc and
        --mode=vmm put them in GPU memory (cudaMalloc / cuMemCreate).
  bench A load generator: for each concurrency level, keeps that many
        requests in flight (or sends --request_rate per second), measures
        in windows until the last --stable_windows agree, and prints
        requests/s, TFLOPS, p50/p90/p95/p99 latency, the mean batch size
        and the server's queue and kernel times. In region modes every
        slot has its own A and C and all share one B (the weights).
        --save keeps the results as JSON; tools/plot_bench.py draws saved
        runs as latency/throughput charts.

ADDR is unix:/path/to.sock (default unix:/run/matmul/matmul.sock, the
daemon's) or host:port.

Examples:
  matmul-cli info --json
  matmul-cli health --target=unix:/run/matmul/matmul.sock --timeout=3s
  matmul-cli run --shape=127x255x63 --check
  matmul-cli run --shape=4096x4096x4096 --transpose_b --iterations=20
  matmul-cli run --shape=4096x4096x4096 --mode=shm --iterations=20
  matmul-cli bench --shape=16x4096x4096 --transpose_b --mode=ipc \
      --label="batching on" --save=on.json
  /usr/bin/python3 tools/plot_bench.py off.json on.json -o chart.png

Exit codes: 0 ok, 1 RPC failure, --check mismatch or not serving, 2 usage
error.)";

bool IsHelpRequest(absl::string_view arg) {
  return arg == "help" || arg == "-h" || arg == "-help" || arg == "--help" ||
         arg == "-helpshort" || arg == "--helpshort";
}

// The usage message and this program's flags, sorted, with their defaults.
// absl's own --help would exit 1 and list its internal flags as well.
void PrintHelp() {
  std::cout << "matmul-cli: " << kUsage << "\n\nFlags:\n";
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::StrContains(flag->Filename(), "matmul_cli")) {
      flags.push_back(flag);
    }
  }
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  for (const absl::CommandLineFlag* flag : flags) {
    std::cout << absl::StreamFormat(
        "  --%s (default %s)\n      %s\n", flag->Name(),
        flag->DefaultValue().empty() ? "\"\"" : flag->DefaultValue(),
        flag->Help());
  }
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  // --helpfull and friends (handled by absl) list the flags of
  // matmul_cli_flags.cc only.
  matmul::HelpListsFlagsFrom(kFlagsFile);

  for (int i = 1; i < argc; ++i) {
    if (absl::string_view(argv[i]) == "--") break;
    if (IsHelpRequest(argv[i])) {
      PrintHelp();
      return kExitOk;
    }
  }
  if (absl::Status syntax = CheckFlagSyntax(argc, argv); !syntax.ok()) {
    return UsageError(syntax.message());
  }
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() < 2) {
    return UsageError(
        "missing subcommand; expected 'info', 'health', 'run' or 'bench'");
  }
  if (positional.size() > 2) {
    return UsageError(absl::StrCat("unexpected argument '", positional[2],
                                   "' after the subcommand"));
  }
  const absl::string_view subcommand = positional[1];
  if (subcommand == "info") return RunInfoCommand();
  if (subcommand == "health") return RunHealthCommand();
  if (subcommand == "run") return RunProductCommand();
  if (subcommand == "bench") return RunBenchCommand();
  return UsageError(
      absl::StrCat("unknown subcommand '", subcommand,
                   "'; expected 'info', 'health', 'run' or 'bench'"));
}

}  // namespace
}  // namespace matmul::cli

int main(int argc, char** argv) {
  // As in matmul-server: Debian's abseil has the deadlock detector on, a
  // process-wide lock in every Mutex::Lock (the load generator's hot path).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return matmul::cli::Main(argc, argv);
}
