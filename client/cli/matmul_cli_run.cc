#include "client/cli/matmul_cli_run.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
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
#include "common/status_macros.h"

namespace matmul::cli {
namespace {

// Everything `run` needs, read from the flags once and validated.
struct RunOptions {
  std::string target;
  absl::Duration timeout;
  ProblemSpec spec;
  int64_t iterations = 1;
  bool check = false;
  double tolerance = 0;
  uint64_t seed = 1;
  bool json = false;
  std::string mode = "inline";  // --mode: inline, shm, ipc or vmm
  bool ring = false;
  std::string shm_prefix;
};

absl::StatusOr<RunOptions> RunOptionsFromFlags() {
  RunOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  options.timeout = absl::GetFlag(FLAGS_timeout);
  options.json = absl::GetFlag(FLAGS_json);
  ASSIGN_OR_RETURN(GemmShape shape, ParseGemmShape(absl::GetFlag(FLAGS_shape)));
  absl::StatusOr<DType> out_dtype = ParseDType(absl::GetFlag(FLAGS_out_dtype));
  if (!out_dtype.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--out_dtype: ", out_dtype.status().message()));
  }
  options.spec = ProblemSpec{
      .m = shape.m,
      .n = shape.n,
      .k = shape.k,
      .batch = absl::GetFlag(FLAGS_batch),
      .transpose_a = absl::GetFlag(FLAGS_transpose_a),
      .transpose_b = absl::GetFlag(FLAGS_transpose_b),
      .alpha = absl::GetFlag(FLAGS_alpha),
      .beta = absl::GetFlag(FLAGS_beta),
      .out_dtype = *out_dtype,
      .broadcast_a = absl::GetFlag(FLAGS_broadcast_a),
      .broadcast_b = absl::GetFlag(FLAGS_broadcast_b),
  };
  if (options.spec.batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--batch must be >= 0, got ", options.spec.batch));
  }
  if ((options.spec.broadcast_a || options.spec.broadcast_b) &&
      options.spec.batch == 0) {
    return absl::InvalidArgumentError(
        "--broadcast_a and --broadcast_b need --batch >= 1");
  }
  options.iterations = absl::GetFlag(FLAGS_iterations);
  if (options.iterations < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--iterations must be >= 1, got ", options.iterations));
  }
  options.check = absl::GetFlag(FLAGS_check);
  options.tolerance = absl::GetFlag(FLAGS_tolerance);
  if (options.tolerance == 0) {
    options.tolerance = DefaultTolerance(*out_dtype);
  } else if (!(options.tolerance > 0)) {
    return absl::InvalidArgumentError("--tolerance must be positive");
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--timeout must be positive");
  }
  options.seed = absl::GetFlag(FLAGS_seed);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "inline" && mode != "shm" && mode != "ipc" && mode != "vmm") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--mode must be inline, shm, ipc or vmm, got '", mode, "'"));
  }
  options.mode = mode;
  options.target = TargetForMode(options.target, mode);
  options.ring = absl::GetFlag(FLAGS_ring);
  if (options.ring && mode == "inline") {
    return absl::InvalidArgumentError(
        "--ring needs --mode shm, ipc or vmm: a ring carries requests that "
        "name regions, not tensors");
  }
  options.shm_prefix = absl::GetFlag(FLAGS_shm_prefix);
  return options;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid]
                                : 0.5 * (values[mid - 1] + values[mid]);
}

// What `run` measured, for the text and JSON reports.
struct RunReport {
  std::vector<double> latency_seconds;  // wall clock around each RPC
  std::vector<double> queue_seconds;    // server-side, per response
  std::vector<double> kernel_seconds;
  std::vector<double> total_seconds;
  v1::MatmulResponse last_response;  // backend, kernel, batch_size
  bool checked = false;
  double relative_error = 0.0;
  bool passed = true;
};

void PrintRunText(const RunOptions& options, const RunReport& report) {
  const ProblemSpec& spec = options.spec;
  const double median_latency = Median(report.latency_seconds);
  const double min_latency = *std::min_element(report.latency_seconds.begin(),
                                               report.latency_seconds.end());
  std::cout << absl::StreamFormat(
      "product:    %s (batch %d, alpha %g, beta %g, %s out)\n",
      ProblemSpecName({.m = spec.m,
                       .n = spec.n,
                       .k = spec.k,
                       .batch = spec.batch,
                       .transpose_a = spec.transpose_a,
                       .transpose_b = spec.transpose_b,
                       .broadcast_a = spec.broadcast_a,
                       .broadcast_b = spec.broadcast_b}),
      spec.effective_batch(), *spec.alpha, *spec.beta,
      DTypeName(spec.resolved_out_dtype()));
  std::cout << absl::StreamFormat("target:     %s\n", options.target);
  std::cout << absl::StreamFormat(
      "mode:       %s%s\n", options.mode,
      options.ring ? ", through a request ring" : "");
  if (report.latency_seconds.size() == 1) {
    std::cout << absl::StreamFormat("latency:    %.3f ms (wall clock)\n",
                                    median_latency * 1e3);
  } else {
    std::cout << absl::StreamFormat(
        "latency:    min %.3f ms, median %.3f ms over %d iterations (wall "
        "clock)\n",
        min_latency * 1e3, median_latency * 1e3, report.latency_seconds.size());
  }
  std::cout << absl::StreamFormat(
      "throughput: %.2f GFLOP/s%s\n", spec.flops() / median_latency / 1e9,
      report.latency_seconds.size() > 1 ? " (at the median latency)" : "");
  std::cout << absl::StreamFormat(
      "server:     queue %.3f ms, kernel %.3f ms, total %.3f ms%s\n",
      Median(report.queue_seconds) * 1e3, Median(report.kernel_seconds) * 1e3,
      Median(report.total_seconds) * 1e3,
      report.latency_seconds.size() > 1 ? " (medians)" : "");
  std::cout << absl::StreamFormat("backend:    %s, kernel %s, batch_size %d\n",
                                  report.last_response.backend(),
                                  report.last_response.kernel(),
                                  report.last_response.batch_size());
  if (report.checked) {
    std::cout << absl::StreamFormat(
        "check:      relative error %.3e (tolerance %.1e) %s\n",
        report.relative_error, options.tolerance,
        report.passed ? "PASS" : "FAIL");
  }
}

// A flat JSON object whose keys keep the order they were added in (a
// google.protobuf.Struct would print them in hash order).
class JsonObject {
 public:
  JsonObject& Add(absl::string_view key, double value) {
    // JSON has no NaN or infinity.
    return AddRaw(key, std::isfinite(value) ? absl::StrFormat("%.9g", value)
                                            : std::string("null"));
  }
  JsonObject& Add(absl::string_view key, int64_t value) {
    return AddRaw(key, absl::StrCat(value));
  }
  JsonObject& Add(absl::string_view key, bool value) {
    return AddRaw(key, value ? "true" : "false");
  }
  JsonObject& Add(absl::string_view key, absl::string_view value) {
    return AddRaw(key, Quote(value));
  }
  // Without this, a string literal would pick the bool overload.
  JsonObject& Add(absl::string_view key, const char* value) {
    return Add(key, absl::string_view(value));
  }

  std::string Serialize() const {
    std::vector<std::string> members;
    for (const auto& [key, value] : members_) {
      members.push_back(absl::StrCat("  ", Quote(key), ": ", value));
    }
    return absl::StrCat("{\n", absl::StrJoin(members, ",\n"), "\n}\n");
  }

 private:
  JsonObject& AddRaw(absl::string_view key, std::string json) {
    members_.emplace_back(std::string(key), std::move(json));
    return *this;
  }

  static std::string Quote(absl::string_view text) {
    std::string quoted = "\"";
    for (char c : text) {
      if (c == '"' || c == '\\') {
        absl::StrAppend(&quoted, "\\", std::string(1, c));
      } else if (static_cast<unsigned char>(c) < 0x20) {
        absl::StrAppend(&quoted, absl::StrFormat("\\u%04x", c));
      } else {
        quoted.push_back(c);
      }
    }
    quoted.push_back('"');
    return quoted;
  }

  std::vector<std::pair<std::string, std::string>> members_;
};

void PrintRunJson(const RunOptions& options, const RunReport& report) {
  const ProblemSpec& spec = options.spec;
  const double median_latency = Median(report.latency_seconds);
  const double min_latency = *std::min_element(report.latency_seconds.begin(),
                                               report.latency_seconds.end());
  JsonObject json;
  json.Add("target", options.target)
      .Add("mode", options.mode)
      .Add("ring", options.ring)
      .Add("m", spec.m)
      .Add("n", spec.n)
      .Add("k", spec.k)
      .Add("batch", spec.effective_batch())
      .Add("transpose_a", spec.transpose_a)
      .Add("transpose_b", spec.transpose_b)
      .Add("broadcast_a", spec.broadcast_a)
      .Add("broadcast_b", spec.broadcast_b)
      .Add("alpha", double{*spec.alpha})
      .Add("beta", double{*spec.beta})
      .Add("out_dtype", DTypeName(spec.resolved_out_dtype()))
      .Add("iterations", static_cast<int64_t>(report.latency_seconds.size()))
      .Add("latency_ms_min", min_latency * 1e3)
      .Add("latency_ms_median", median_latency * 1e3)
      .Add("gflops", spec.flops() / median_latency / 1e9)
      .Add("server_queue_ms", Median(report.queue_seconds) * 1e3)
      .Add("server_kernel_ms", Median(report.kernel_seconds) * 1e3)
      .Add("server_total_ms", Median(report.total_seconds) * 1e3)
      .Add("backend", report.last_response.backend())
      .Add("kernel", report.last_response.kernel())
      .Add("batch_size",
           static_cast<int64_t>(report.last_response.batch_size()));
  if (report.checked) {
    json.Add("relative_error", report.relative_error)
        .Add("tolerance", options.tolerance)
        .Add("check", report.passed ? "PASS" : "FAIL");
  }
  std::cout << json.Serialize();
}

// Where the timed requests' operands live: inline in the request, or in a
// registered region (set up once, before timing): a shm segment, or GPU
// memory filled from a host staging copy.
struct Operands {
  v1::MatmulRequest request;  // what is sent
  // Region modes: destroyed ring, then region, then session (members go
  // in reverse order).
  std::unique_ptr<Session> session;
  std::unique_ptr<SharedMemorySegment> segment;  // --mode=shm
  std::unique_ptr<CudaMemory> gpu;               // --mode=ipc|vmm
  std::vector<char> staging;                     // host image of `gpu`
  std::unique_ptr<RegisteredRegion> region;
  RegionRequest placed;
  std::unique_ptr<RequestRing> ring;  // --ring

  // The region's bytes as the host sees them (for GPU memory: copied back
  // first).
  absl::StatusOr<absl::Span<const char>> RegionBytes() {
    if (segment != nullptr) return absl::Span<const char>(segment->bytes());
    RETURN_IF_ERROR(gpu->CopyToHost(absl::MakeSpan(staging)));
    return absl::Span<const char>(staging);
  }
};

// Puts the operands into a fresh region of the mode's kind and registers
// it; only the RPCs that follow are timed.
absl::Status PlaceInRegion(Client& client, const RunOptions& options,
                           Operands& operands) {
  ASSIGN_OR_RETURN(operands.session,
                   Session::Open(client, "matmul-cli", options.timeout));
  ASSIGN_OR_RETURN(uint64_t bytes,
                   RegionBytesNeeded(operands.request, RegionPlacement{}));
  absl::Span<char> memory;
  if (options.mode == "shm") {
    ASSIGN_OR_RETURN(operands.segment,
                     SharedMemorySegment::Create(static_cast<int64_t>(bytes),
                                                 options.shm_prefix));
    ASSIGN_OR_RETURN(operands.region,
                     RegisteredRegion::RegisterShm(client, *operands.session,
                                                   *operands.segment, 0, 0,
                                                   options.timeout));
    // The name is no longer needed: unlinked now, nothing is left in
    // /dev/shm even if this process is killed.
    operands.segment->Unlink();
    memory = operands.segment->bytes();
  } else {
    ASSIGN_OR_RETURN(
        operands.gpu,
        CudaMemory::Create(options.mode == "ipc" ? CudaMemory::Kind::kIpc
                                                 : CudaMemory::Kind::kVmm,
                           static_cast<int64_t>(bytes)));
    ASSIGN_OR_RETURN(operands.region,
                     RegisteredRegion::Register(client, *operands.session,
                                                operands.gpu->RegisterRequest(),
                                                options.timeout));
    operands.staging.resize(static_cast<size_t>(operands.gpu->size_bytes()));
    memory = absl::MakeSpan(operands.staging);
  }
  ASSIGN_OR_RETURN(
      operands.placed,
      matmul::PlaceInRegion(operands.request, memory, operands.region->id(),
                            operands.session->session_id(), RegionPlacement{}));
  if (operands.gpu != nullptr) {
    RETURN_IF_ERROR(operands.gpu->CopyFromHost(operands.staging));
  }
  operands.request = operands.placed.request;
  if (options.ring) {
    ASSIGN_OR_RETURN(operands.ring,
                     RequestRing::Attach(client, *operands.session,
                                         {.shm_prefix = options.shm_prefix},
                                         options.timeout));
  }
  return absl::OkStatus();
}

int RunProduct(const RunOptions& options) {
  std::mt19937_64 rng(options.seed);
  absl::StatusOr<v1::MatmulRequest> random_request =
      MakeRandomRequest(options.spec, rng);
  if (!random_request.ok()) {
    return UsageError(random_request.status().message());
  }
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Create(options.target, CliClientOptions(options.timeout));
  if (!client.ok()) return UsageError(client.status().message());
  // After the client: the region and session it holds are released through
  // the client's channel, so they must go first.
  Operands operands;
  operands.request = *std::move(random_request);

  // Connect with a cheap call first, so that the first timed RPC does not
  // include setting up the connection. Unlike WaitForConnected, a call
  // fails fast when nothing listens.
  if (absl::StatusOr<v1::GetServerInfoResponse> info =
          (*client)->GetServerInfo(options.timeout);
      !info.ok()) {
    return RpcError("GetServerInfo", info.status(), options.target);
  }
  if (options.mode != "inline") {
    if (absl::Status placed = PlaceInRegion(**client, options, operands);
        !placed.ok()) {
      return RpcError(absl::StrCat("setting up the ", options.mode, " region"),
                      placed, options.target);
    }
  }
  v1::MatmulRequest& request = operands.request;

  RunReport report;
  for (int64_t i = 0; i < options.iterations; ++i) {
    request.set_request_id(static_cast<uint64_t>(i + 1));
    const absl::Time start = absl::Now();
    absl::StatusOr<v1::MatmulResponse> response =
        operands.ring != nullptr
            ? operands.ring->Matmul(request, options.timeout)
            : (*client)->Matmul(request, options.timeout);
    const absl::Duration latency = absl::Now() - start;
    if (!response.ok()) {
      return RpcError("Matmul", response.status(), options.target);
    }
    report.latency_seconds.push_back(absl::ToDoubleSeconds(latency));
    report.queue_seconds.push_back(response->timing().queue_seconds());
    report.kernel_seconds.push_back(response->timing().kernel_seconds());
    report.total_seconds.push_back(response->timing().total_seconds());
    if (options.check && i == 0) {
      // In region modes C is read back from the region (before a later
      // iteration overwrites it).
      absl::StatusOr<double> error;
      if (options.mode == "inline") {
        error = CheckResponse(request, *response);
      } else if (absl::StatusOr<absl::Span<const char>> bytes =
                     operands.RegionBytes();
                 bytes.ok()) {
        error = CheckRegionResponse(operands.placed, *response, *bytes);
      } else {
        error = bytes.status();
      }
      if (!error.ok()) {
        std::cerr << "matmul-cli: check failed: " << error.status() << "\n";
        return kExitFailure;
      }
      report.checked = true;
      report.relative_error = *error;
      // NaN compares false: a NaN error fails too.
      report.passed = *error < options.tolerance;
    }
    report.last_response = *std::move(response);
  }
  if (options.json) {
    PrintRunJson(options, report);
  } else {
    PrintRunText(options, report);
  }
  return report.passed ? kExitOk : kExitFailure;
}

}  // namespace

int RunProductCommand() {
  absl::StatusOr<RunOptions> options = RunOptionsFromFlags();
  if (!options.ok()) return UsageError(options.status().message());
  return RunProduct(*options);
}

}  // namespace matmul::cli
