#include "client/cli/matmul_cli_bench.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/bench/bench_report.h"
#include "client/bench/load_generator.h"
#include "client/cli/exit_codes.h"
#include "client/cli/matmul_cli_flags.h"
#include "client/client.h"
#include "client/regions/cuda_memory.h"
#include "client/regions/region_request_builder.h"
#include "client/regions/registered_region.h"
#include "client/regions/shared_memory_segment.h"
#include "client/request_builder.h"
#include "client/ring/request_ring.h"
#include "client/session.h"
#include "common/bf16.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, concurrency, "1,4,16,64",
          "bench: comma-separated concurrency levels (requests in flight).");
ABSL_FLAG(double, request_rate, 0,
          "bench: requests per second to send (open loop, at most "
          "--concurrency in flight); 0 sends the next request as soon as one "
          "is answered (closed loop).");
ABSL_FLAG(int64_t, requests, 0,
          "bench: a measurement window is this many answers; 0 uses "
          "--duration.");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(2),
          "bench: length of a measurement window.");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(1),
          "bench: unmeasured run before each level's first window.");
ABSL_FLAG(int, max_windows, 10,
          "bench: windows per level before giving up on stability.");
ABSL_FLAG(int, stable_windows, 3,
          "bench: a level is stable when this many consecutive windows "
          "agree; its statistics cover them.");
ABSL_FLAG(double, stability_percent, 10,
          "bench: how far (percent) those windows' throughput and p50 "
          "latency may stray from their mean.");
ABSL_FLAG(int, channels, 4,
          "bench: gRPC connections the requests are spread over.");
ABSL_FLAG(bool, stream, false,
          "bench: each slot sends its requests over one MatmulStream "
          "instead of one unary call each (less per-call overhead).");
ABSL_FLAG(int, rings, 0,
          "bench: send requests through this many shared-memory request "
          "rings (AttachRing; a daemon on this host, --mode shm, ipc or vmm) "
          "instead of gRPC calls: no socket round trip per request. Each "
          "ring has a poller in the daemon and a completion thread here, so "
          "several spread the per-request work. 0: gRPC.");
ABSL_FLAG(absl::Duration, ring_spin, absl::Microseconds(100),
          "bench --rings: how long a ring's completion thread polls for "
          "answers before it sleeps (a busy core while it polls).");
ABSL_FLAG(bool, csv, false, "bench: print CSV instead of the table.");
ABSL_FLAG(std::string, save, "",
          "bench: also write the results as JSON to this file (charts: "
          "tools/plot_bench.py FILE.json...).");
ABSL_FLAG(std::string, label, "this run",
          "bench: the name of this run in the reports and in "
          "tools/plot_bench.py's chart, e.g. "
          "\"batching on\".");

namespace matmul::cli {
namespace {

struct BenchOptions {
  std::string target;
  absl::Duration timeout;
  ProblemSpec spec;
  std::string mode;
  std::string shm_prefix;
  uint64_t seed = 1;
  std::vector<int> levels;
  bench::LoadOptions load;
  int channels = 4;
  int rings = 0;
  absl::Duration ring_spin;
  bool json = false;
  bool csv = false;
  std::string save;
  std::string label;
};

absl::StatusOr<BenchOptions> BenchOptionsFromFlags() {
  BenchOptions o;
  o.target = absl::GetFlag(FLAGS_target);
  o.timeout = absl::GetFlag(FLAGS_timeout);
  ASSIGN_OR_RETURN(GemmShape shape, ParseGemmShape(absl::GetFlag(FLAGS_shape)));
  absl::StatusOr<DType> out_dtype = ParseDType(absl::GetFlag(FLAGS_out_dtype));
  if (!out_dtype.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--out_dtype: ", out_dtype.status().message()));
  }
  o.spec = ProblemSpec{.m = shape.m,
                       .n = shape.n,
                       .k = shape.k,
                       .transpose_a = absl::GetFlag(FLAGS_transpose_a),
                       .transpose_b = absl::GetFlag(FLAGS_transpose_b),
                       .out_dtype = *out_dtype};
  o.mode = absl::GetFlag(FLAGS_mode);
  if (o.mode != "inline" && o.mode != "shm" && o.mode != "ipc" &&
      o.mode != "vmm") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--mode must be inline, shm, ipc or vmm, got '", o.mode, "'"));
  }
  o.target = TargetForMode(o.target, o.mode);

  o.shm_prefix = absl::GetFlag(FLAGS_shm_prefix);
  o.seed = absl::GetFlag(FLAGS_seed);
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_concurrency),
                                               ',', absl::SkipWhitespace())) {
    int level = 0;
    if (!absl::SimpleAtoi(part, &level) || level < 1 || level > 4096) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--concurrency: '", part, "' is not a level in 1..4096"));
    }
    o.levels.push_back(level);
  }
  if (o.levels.empty()) {
    return absl::InvalidArgumentError("--concurrency lists no level");
  }
  o.load.request_rate = absl::GetFlag(FLAGS_request_rate);
  o.load.window_requests = absl::GetFlag(FLAGS_requests);
  o.load.window = absl::GetFlag(FLAGS_duration);
  o.load.warmup = absl::GetFlag(FLAGS_warmup);
  o.load.max_windows = absl::GetFlag(FLAGS_max_windows);
  o.load.stable_windows = absl::GetFlag(FLAGS_stable_windows);
  o.load.stability = absl::GetFlag(FLAGS_stability_percent) / 100.0;
  o.load.timeout = o.timeout;
  o.load.stream = absl::GetFlag(FLAGS_stream);
  if (!(o.load.request_rate >= 0)) {
    return absl::InvalidArgumentError("--request_rate must be >= 0");
  }
  if (o.load.window_requests < 0 ||
      (o.load.window_requests == 0 && o.load.window <= absl::ZeroDuration())) {
    return absl::InvalidArgumentError(
        "--requests must be >= 0 and --duration positive");
  }
  if (o.load.warmup < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--warmup must be >= 0");
  }
  if (o.load.stable_windows < 1 || o.load.max_windows < o.load.stable_windows) {
    return absl::InvalidArgumentError(
        "need 1 <= --stable_windows <= --max_windows");
  }
  if (!(o.load.stability > 0)) {
    return absl::InvalidArgumentError("--stability_percent must be positive");
  }
  if (o.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--timeout must be positive");
  }
  o.rings = absl::GetFlag(FLAGS_rings);
  o.ring_spin = absl::GetFlag(FLAGS_ring_spin);
  if (o.rings < 0 || o.rings > 64) {
    return absl::InvalidArgumentError("--rings must be in 0..64");
  }
  if (o.rings > 0 && (o.mode == "inline" || o.load.stream)) {
    return absl::InvalidArgumentError(
        "--rings needs --mode shm, ipc or vmm (a ring carries region "
        "requests, not tensors), and excludes --stream");
  }
  if (o.ring_spin < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--ring_spin must be >= 0");
  }
  o.channels = absl::GetFlag(FLAGS_channels);
  if (o.channels < 1 || o.channels > 256) {
    return absl::InvalidArgumentError("--channels must be in 1..256");
  }
  o.json = absl::GetFlag(FLAGS_json);
  o.csv = absl::GetFlag(FLAGS_csv);
  if (o.json && o.csv) {
    return absl::InvalidArgumentError("--json and --csv exclude each other");
  }
  o.save = absl::GetFlag(FLAGS_save);
  o.label = absl::GetFlag(FLAGS_label);
  return o;
}

// The operands of every slot. Inline: one request that all slots send.
// Region modes: one region holding the shared B (the weights, as when many
// clients call one layer) and an A and a C per slot, so that concurrent
// outputs never collide.
struct Workload {
  std::unique_ptr<Session> session;
  std::unique_ptr<SharedMemorySegment> segment;
  std::unique_ptr<CudaMemory> gpu;
  std::unique_ptr<RegisteredRegion> region;
  // --rings; destroyed before the session.
  std::vector<std::unique_ptr<RequestRing>> rings;
  std::vector<v1::MatmulRequest> requests;
};

absl::Status PrepareWorkload(Client& client, const BenchOptions& o, int slots,
                             Workload& w) {
  std::mt19937_64 rng(o.seed);
  ASSIGN_OR_RETURN(v1::MatmulRequest first, MakeRandomRequest(o.spec, rng));
  if (o.mode == "inline") {
    w.requests.push_back(std::move(first));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(uint64_t first_end,
                   RegionBytesNeeded(first, RegionPlacement{}));
  const uint64_t a_bytes = first.a().inline_data().size();
  const uint64_t c_bytes = static_cast<uint64_t>(o.spec.m) * o.spec.n *
                           DTypeSize(o.spec.resolved_out_dtype());
  const uint64_t per_slot =
      AlignRegionOffset(a_bytes) + AlignRegionOffset(c_bytes);
  const uint64_t total = AlignRegionOffset(first_end) + (slots - 1) * per_slot;

  ASSIGN_OR_RETURN(w.session,
                   Session::Open(client, "matmul-cli bench", o.timeout));
  std::vector<char> staging;
  absl::Span<char> memory;
  if (o.mode == "shm") {
    ASSIGN_OR_RETURN(w.segment, SharedMemorySegment::Create(
                                    static_cast<int64_t>(total), o.shm_prefix));
    ASSIGN_OR_RETURN(
        w.region, RegisteredRegion::RegisterShm(client, *w.session, *w.segment,
                                                0, 0, o.timeout));
    w.segment->Unlink();
    memory = w.segment->bytes();
  } else {
    ASSIGN_OR_RETURN(
        w.gpu, CudaMemory::Create(o.mode == "ipc" ? CudaMemory::Kind::kIpc
                                                  : CudaMemory::Kind::kVmm,
                                  static_cast<int64_t>(total)));
    ASSIGN_OR_RETURN(
        w.region, RegisteredRegion::Register(
                      client, *w.session, w.gpu->RegisterRequest(), o.timeout));
    staging.resize(static_cast<size_t>(w.gpu->size_bytes()));
    memory = absl::MakeSpan(staging);
  }
  ASSIGN_OR_RETURN(RegionRequest placed,
                   PlaceInRegion(first, memory, w.region->id(),
                                 w.session->session_id(), RegionPlacement{}));
  w.requests.push_back(placed.request);
  // Further slots: fresh random A, their own C, slot 0's B.
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  uint64_t next = AlignRegionOffset(first_end);
  for (int slot = 1; slot < slots; ++slot) {
    const uint64_t a_offset = next;
    const uint64_t c_offset = AlignRegionOffset(a_offset + a_bytes);
    next = c_offset + AlignRegionOffset(c_bytes);
    uint16_t* a = reinterpret_cast<uint16_t*>(memory.data() + a_offset);
    for (uint64_t i = 0; i < a_bytes / 2; ++i) a[i] = FloatToBf16(uniform(rng));
    v1::MatmulRequest request = placed.request;
    request.mutable_a()->mutable_region()->set_offset_bytes(a_offset);
    request.mutable_c()->mutable_region()->set_offset_bytes(c_offset);
    w.requests.push_back(std::move(request));
  }
  if (w.gpu != nullptr) RETURN_IF_ERROR(w.gpu->CopyFromHost(staging));
  for (int i = 0; i < o.rings; ++i) {
    // Enough slots for every level's share of this ring.
    const int ring_slots = (slots + o.rings - 1) / o.rings;
    ASSIGN_OR_RETURN(std::unique_ptr<RequestRing> ring,
                     RequestRing::Attach(client, *w.session,
                                         {.slots = ring_slots,
                                          .spin = o.ring_spin,
                                          .shm_prefix = o.shm_prefix},
                                         o.timeout));
    w.rings.push_back(std::move(ring));
  }
  return absl::OkStatus();
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// One line per window on stderr (overwritten in place on a terminal).
void ShowProgress(int concurrency,
                  const std::vector<bench::WindowStats>& windows) {
  const bench::WindowStats& w = windows.back();
  const bool tty = isatty(STDERR_FILENO);
  std::fprintf(
      stderr, "%sconcurrency %d, window %zu: %.0f req/s, p50 %.3f ms%s%s",
      tty ? "\r\033[K" : "", concurrency, windows.size(), w.requests_per_second,
      w.p50_latency * 1e3,
      w.errors > 0 ? absl::StrCat(", ", w.errors, " errors").c_str() : "",
      tty ? "" : "\n");
  std::fflush(stderr);
}

}  // namespace

int RunBenchCommand() {
  absl::StatusOr<BenchOptions> options = BenchOptionsFromFlags();
  if (!options.ok()) {
    std::cerr << "matmul-cli: " << options.status().message()
              << "\nRun 'matmul-cli --help' for usage.\n";
    return kExitUsage;
  }
  const BenchOptions& o = *options;
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Create(o.target, {.default_timeout = o.timeout});
  if (!client.ok()) {
    std::cerr << "matmul-cli: " << client.status().message() << "\n";
    return kExitUsage;
  }
  // A cheap call first: it fails fast when nothing listens at the target.
  if (absl::StatusOr<v1::GetServerInfoResponse> info =
          (*client)->GetServerInfo(o.timeout);
      !info.ok()) {
    std::cerr << "matmul-cli: GetServerInfo failed: " << info.status()
              << " (is matmul-server listening on " << o.target << "?)\n";
    return kExitFailure;
  }
  int slots = 1;
  for (int level : o.levels) slots = std::max(slots, level);
  Workload workload;
  if (absl::Status prepared = PrepareWorkload(**client, o, slots, workload);
      !prepared.ok()) {
    std::cerr << "matmul-cli: preparing the " << o.mode
              << " operands failed: " << prepared << "\n";
    return kExitFailure;
  }
  absl::StatusOr<std::unique_ptr<bench::LoadGenerator>> generator =
      bench::LoadGenerator::Create(o.target, o.channels, workload.requests,
                                   o.spec.flops());
  if (!generator.ok()) {
    std::cerr << "matmul-cli: " << generator.status() << "\n";
    return kExitFailure;
  }
  bench::BenchRun run;
  run.label = o.label;
  run.shape = absl::StrCat(o.spec.m, "x", o.spec.n, "x", o.spec.k, ":",
                           o.spec.transpose_a ? "T" : "N",
                           o.spec.transpose_b ? "T" : "N");
  run.mode = o.rings > 0 ? absl::StrCat(o.mode, " rings ", o.rings) : o.mode;
  run.flops_per_request = o.spec.flops();
  for (int level : o.levels) {
    bench::LoadOptions load = o.load;
    load.concurrency = level;
    for (const std::unique_ptr<RequestRing>& ring : workload.rings) {
      load.rings.push_back(ring.get());
    }
    absl::StatusOr<bench::LevelResult> result =
        (*generator)
            ->RunLevel(load,
                       [level](const std::vector<bench::WindowStats>& windows) {
                         ShowProgress(level, windows);
                       });
    std::fprintf(stderr, "\n");
    if (!result.ok()) {
      std::cerr << "matmul-cli: concurrency " << level << ": "
                << result.status() << "\n";
      return kExitFailure;
    }
    run.levels.push_back(*std::move(result));
  }
  if (o.json) {
    std::cout << bench::ToJson(run);
  } else if (o.csv) {
    std::cout << bench::ToCsv(run);
  } else {
    std::cout << bench::FormatTable(run);
  }
  if (!o.save.empty()) {
    if (absl::Status saved = WriteFile(o.save, bench::ToJson(run));
        !saved.ok()) {
      std::cerr << "matmul-cli: " << saved << "\n";
      return kExitFailure;
    }
  }
  int64_t errors = 0;
  for (const bench::LevelResult& level : run.levels) errors += level.errors;
  return errors == 0 ? kExitOk : kExitFailure;
}

}  // namespace matmul::cli
