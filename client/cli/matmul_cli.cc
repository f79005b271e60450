// matmul-cli: asks a matmul daemon what it is (`info`) or whether it serves
// (`health`, grpc.health.v1: the probe of the container and Kubernetes
// manifests in deploy/), runs a random product through it, timed and
// optionally checked against the FP64 reference (`run`), or loads it at
// several concurrency levels (`bench`).
// Exit codes: 0 ok, 1 RPC or check failure (or not serving), 2 usage.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli/exit_codes.h"
#include "client/cli/matmul_cli_bench.h"
#include "client/client.h"
#include "client/cuda_memory.h"
#include "client/region_request_builder.h"
#include "client/registered_region.h"
#include "client/request_builder.h"
#include "client/request_ring.h"
#include "client/session.h"
#include "client/shared_memory_segment.h"
#include "common/flags_help.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

ABSL_FLAG(std::string, target, "unix:/run/matmul/matmul.sock",
          "Daemon address: unix:/path/to.sock or host:port.");
ABSL_FLAG(std::string, tls_ca, "",
          "TCP daemons serving TLS: the PEM CA that signed the daemon's "
          "certificate (turns TLS on).");
ABSL_FLAG(std::string, tls_cert, "",
          "With --tls_ca: this client's PEM certificate, for daemons that "
          "require one (--tls_client_ca there).");
ABSL_FLAG(std::string, tls_key, "", "The PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_server_name, "",
          "With --tls_ca: the name the daemon's certificate must carry, when "
          "it is not the target's host (an IP address, say).");
ABSL_FLAG(bool, json, false, "Print the result as one JSON object.");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(60),
          "Deadline of each RPC, e.g. 500ms, 30s, 2m.");
ABSL_FLAG(std::string, shape, "256x256x256",
          "run: the product's M, N and K, as MxNxK.");
ABSL_FLAG(bool, transpose_a, false, "run: send A as [K, M] with transpose_a.");
ABSL_FLAG(bool, transpose_b, false,
          "run: send B as [N, K] with transpose_b (PyTorch nn.Linear).");
ABSL_FLAG(int64_t, batch, 0,
          "run: leading batch dimension; 0 sends rank-2 operands.");
ABSL_FLAG(bool, broadcast_a, false,
          "run: with --batch, send one A for the whole batch (stride 0).");
ABSL_FLAG(bool, broadcast_b, false,
          "run: with --batch, send one B for the whole batch (stride 0).");
ABSL_FLAG(float, alpha, 1.0f, "run: C = alpha * op(A) op(B) + beta * C.");
ABSL_FLAG(float, beta, 0.0f,
          "run: nonzero sends a random initial C in the output dtype.");
ABSL_FLAG(std::string, out_dtype, "bf16", "run: output dtype, bf16 or fp32.");
ABSL_FLAG(int64_t, iterations, 1,
          "run: products to time (the same request each time); with more "
          "than one, min and median latency are reported.");
ABSL_FLAG(bool, check, false,
          "run: compare the first result with the local FP64 reference and "
          "exit 1 when the relative error reaches --tolerance. The reference "
          "is a plain triple loop: seconds for 1024^3, minutes beyond.");
ABSL_FLAG(double, tolerance, 0,
          "run: --check's relative error bound; 0 picks it from the output "
          "dtype: 1e-2 for bf16, 1e-4 for fp32.");
ABSL_FLAG(uint64_t, seed, 1, "run: seed of the random operands.");
ABSL_FLAG(std::string, mode, "inline",
          "run: how operands travel. inline: in every request. shm: copied "
          "once into a POSIX shared-memory segment registered as a region "
          "(the daemon must run on this host); requests name it and C is "
          "written there in place, so only the RPCs are timed. ipc: the same "
          "in cudaMalloc memory shared by CUDA IPC handle; vmm: in a "
          "cuMemCreate allocation shared as a file descriptor (both need a "
          "GPU here and a daemon on the CUDA backend). With a nonzero "
          "--beta, later iterations read the C the previous one wrote.");
ABSL_FLAG(bool, ring, false,
          "run: send the requests through a shared-memory request ring "
          "(AttachRing) instead of gRPC calls: for --mode shm, ipc or vmm "
          "and a daemon on this host; the latency then has no socket round "
          "trip in it.");
ABSL_FLAG(std::string, shm_prefix, "matmul",
          "run --mode=shm: the daemon's --shm_prefix; segment names start "
          "with it.");

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
  options.ring = absl::GetFlag(FLAGS_ring);
  if (options.ring && mode == "inline") {
    return absl::InvalidArgumentError(
        "--ring needs --mode shm, ipc or vmm: a ring carries requests that "
        "name regions, not tensors");
  }
  options.shm_prefix = absl::GetFlag(FLAGS_shm_prefix);
  return options;
}

// absl::ParseCommandLine exits 1 on an unknown flag or a malformed value;
// this CLI promises 2 for every usage error, so check both first. Accepts
// --name=value, --name value, --bool_flag and --nobool_flag.
absl::Status CheckFlagSyntax(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || !absl::ConsumePrefix(&arg, "-")) continue;
    absl::ConsumePrefix(&arg, "-");
    const size_t equals = arg.find('=');
    const bool has_value = equals != absl::string_view::npos;
    absl::string_view name = arg.substr(0, equals);
    std::string value(has_value ? arg.substr(equals + 1) : "");

    // absl handles these before (and without) registering them as flags.
    if (name == "helpfull" || name == "helppackage" || name == "helpon" ||
        name == "helpmatch" || name == "version" || name == "only_check_args") {
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    bool negated = false;
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      negated = flag != nullptr;
      if (negated && !flag->IsOfType<bool>()) flag = nullptr;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (negated) {
      if (has_value) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " takes no value"));
      }
      continue;
    }
    if (!has_value) {
      if (flag->IsOfType<bool>()) continue;
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " needs a value"));
      }
      value = argv[++i];
    }
    // Flags that absl interprets itself (--flagfile, --help=substring...)
    // are left to it; for ours, parse the value now to catch mistakes. The
    // value set here is set again, identically, by ParseCommandLine.
    if (!absl::StrContains(flag->Filename(), "matmul_cli")) continue;
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad value \"", value, "\" for --", name, ": ", error));
    }
  }
  return absl::OkStatus();
}

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

int UsageError(absl::string_view message) {
  std::cerr << "matmul-cli: " << message
            << "\nRun 'matmul-cli --help' for usage.\n";
  return kExitUsage;
}

int RpcError(absl::string_view what, const absl::Status& status,
             absl::string_view target) {
  std::cerr << "matmul-cli: " << what << " failed: " << status;
  if (status.code() == absl::StatusCode::kUnavailable) {
    std::cerr << " (is matmul-server listening on " << target << "?)";
  }
  std::cerr << "\n";
  return kExitFailure;
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  // Printing a well-formed message cannot fail; an empty object if it did.
  if (!google::protobuf::util::MessageToJsonString(message, &json, options)
           .ok()) {
    return "{}\n";
  }
  return json;
}

std::string DTypeList(const google::protobuf::RepeatedField<int>& dtypes) {
  std::vector<std::string> names;
  for (int dtype : dtypes) {
    absl::StatusOr<DType> known = FromProtoDType(static_cast<v1::DType>(dtype));
    names.push_back(known.ok() ? DTypeName(*known)
                               : v1::DType_Name(static_cast<v1::DType>(dtype)));
  }
  return names.empty() ? "-" : absl::StrJoin(names, ", ");
}

std::string Bytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) {
    return absl::StrFormat("%.1f GiB", bytes / double(int64_t{1} << 30));
  }
  if (bytes >= (int64_t{1} << 20)) {
    return absl::StrFormat("%.1f MiB", bytes / double(int64_t{1} << 20));
  }
  return absl::StrCat(bytes, " B");
}

// The client options every subcommand shares: its timeout and TLS flags.
ClientOptions CliClientOptions(absl::Duration timeout) {
  ClientOptions options;
  options.default_timeout = timeout;
  options.tls = {.ca_file = absl::GetFlag(FLAGS_tls_ca),
                 .cert_file = absl::GetFlag(FLAGS_tls_cert),
                 .key_file = absl::GetFlag(FLAGS_tls_key),
                 .server_name = absl::GetFlag(FLAGS_tls_server_name)};
  return options;
}

int RunInfo(absl::string_view target, absl::Duration timeout, bool json) {
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Create(std::string(target), CliClientOptions(timeout));
  if (!client.ok()) return UsageError(client.status().message());
  absl::StatusOr<v1::GetServerInfoResponse> info =
      (*client)->GetServerInfo(timeout);
  if (!info.ok()) return RpcError("GetServerInfo", info.status(), target);
  if (json) {
    std::cout << ToJson(*info);
    return kExitOk;
  }
  std::cout << absl::StreamFormat("target:   %s\n", target)
            << absl::StreamFormat("version:  %s\n", info->version())
            << absl::StreamFormat("backend:  %s\n", info->backend())
            << "devices:\n";
  for (int i = 0; i < info->devices_size(); ++i) {
    const v1::Device& device = info->devices(i);
    std::cout << absl::StreamFormat(
        "  [%d] %s: %s, %d %s, %s\n", i, device.name(),
        device.compute_capability().empty()
            ? "CPU"
            : absl::StrCat("compute capability ", device.compute_capability()),
        device.multiprocessors(),
        device.compute_capability().empty() ? "cores" : "SMs",
        device.memory_bytes() > 0
            ? absl::StrCat(Bytes(device.memory_bytes()), " memory")
            : "memory not reported");
  }
  if (info->devices_size() == 0) std::cout << "  (none reported)\n";
  const v1::Limits& limits = info->limits();
  std::cout << "limits:\n"
            << absl::StreamFormat("  max_message_bytes:       %d (%s)\n",
                                  limits.max_message_bytes(),
                                  Bytes(limits.max_message_bytes()))
            << absl::StreamFormat("  max_dimension:           %d\n",
                                  limits.max_dimension())
            << absl::StreamFormat("  max_tensor_bytes:        %d (%s)\n",
                                  limits.max_tensor_bytes(),
                                  Bytes(limits.max_tensor_bytes()))
            << absl::StreamFormat("  max_concurrent_requests: %d\n",
                                  limits.max_concurrent_requests())
            << absl::StreamFormat("input dtypes:  %s\n",
                                  DTypeList(info->supported_input_dtypes()))
            << absl::StreamFormat("output dtypes: %s\n",
                                  DTypeList(info->supported_output_dtypes()));
  return kExitOk;
}

// grpc.health.v1 Check for the whole server (service ""). A plain channel
// without wait-for-ready: a probe must fail fast when nothing listens.
int RunHealth(absl::string_view target, absl::Duration timeout) {
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      std::string(target), grpc::InsecureChannelCredentials());
  std::unique_ptr<grpc::health::v1::Health::Stub> stub =
      grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    return RpcError(
        "health check",
        absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                     status.error_message()),
        target);
  }
  const std::string name =
      grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
          response.status());
  if (response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    std::cerr << "matmul-cli: the daemon at " << target << " is " << name
              << ", not SERVING (draining after SIGTERM, or stopped serving "
                 "after a fault; its supervisor should restart it)\n";
    return kExitFailure;
  }
  std::cout << name << "\n";
  return kExitOk;
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

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  // --helpfull and friends (handled by absl) list this file's flags only.
  matmul::HelpListsFlagsFrom("matmul_cli.cc");

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
  if (subcommand == "info") {
    const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
    if (timeout <= absl::ZeroDuration()) {
      return UsageError("--timeout must be positive");
    }
    return RunInfo(absl::GetFlag(FLAGS_target), timeout,
                   absl::GetFlag(FLAGS_json));
  }
  if (subcommand == "health") {
    const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
    if (timeout <= absl::ZeroDuration()) {
      return UsageError("--timeout must be positive");
    }
    return RunHealth(absl::GetFlag(FLAGS_target), timeout);
  }
  if (subcommand == "run") {
    absl::StatusOr<RunOptions> options = RunOptionsFromFlags();
    if (!options.ok()) return UsageError(options.status().message());
    return RunProduct(*options);
  }
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
