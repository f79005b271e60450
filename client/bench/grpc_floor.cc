// grpc-floor: how far the daemon's unary Matmul is from what gRPC itself
// can do, measured in one process over unix sockets. It serves a bare echo
// service in-process (synchronous and callback API) and measures
//   * ping-pong latency (p50/p90/p99 at concurrency 1),
//   * the throughput of an echo carrying a large product's sizes (A and B
//     in, C out),
// then, with --target, the daemon's Matmul:
//   * 1x1x1 inline and --small_shape (inline, or in shm / CUDA IPC regions)
//     end to end minus the kernel time the response reports,
//   * --large_shape inline payload throughput,
// and prints the two side by side (--json writes them). --grpc_args
// applies the same transport settings to the echo servers and to every
// channel; start the daemon with the same --grpc_args to compare like with
// like.
//
//   grpc-floor --target=unix:/run/matmul/matmul.sock --json=floor.json
//   grpc-floor --grpc_args=flow_control_window=67108864,bdp_probe=0
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/bench/grpc_floor_echo_server.h"
#include "client/bench/grpc_floor_probes.h"
#include "client/client.h"
#include "client/regions/cuda_memory.h"
#include "client/regions/region_request_builder.h"
#include "client/regions/registered_region.h"
#include "client/regions/shared_memory_segment.h"
#include "client/request_builder.h"
#include "client/session.h"
#include "common/flags_help.h"
#include "common/grpc_transport_args.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, target, "",
          "The daemon to measure (unix:/path or host:port); empty measures "
          "the bare echo only.");
ABSL_FLAG(std::string, grpc_args, "",
          "Transport settings for the echo servers and every channel: "
          "name=value,... (flow_control_window, max_frame_size, bdp_probe, "
          "write_buffer_size, read_chunk_size, max_read_chunk_size, "
          "resource_quota_bytes, or grpc.* names).");
ABSL_FLAG(int, calls, 2000, "Timed calls per latency measurement.");
ABSL_FLAG(int, warmup, 200, "Untimed calls before each latency measurement.");
ABSL_FLAG(int, large_reps, 5,
          "Timed calls per throughput measurement (after one warm-up).");
ABSL_FLAG(int64_t, ping_bytes, 8, "Payload of the ping-pong, each way.");
ABSL_FLAG(std::string, small_shape, "256x256x256",
          "MxNxK of the small NT product (besides 1x1x1 inline).");
ABSL_FLAG(std::string, small_mode, "inline",
          "Where the small product's operands live: inline, shm or ipc.");
ABSL_FLAG(std::string, large_shape, "5120x11008x2048",
          "MxNxK of the large inline NT product and the echo of its sizes; "
          "empty skips both.");
ABSL_FLAG(std::string, apis, "sync,callback",
          "Echo server APIs to measure: sync, callback or both.");
ABSL_FLAG(std::string, socket_dir, "/tmp",
          "Where the echo servers' unix sockets go.");
ABSL_FLAG(std::string, shm_prefix, "matmul",
          "Name prefix of shm regions (the daemon's --shm_prefix).");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(120), "Deadline per call.");
ABSL_FLAG(std::string, json, "", "Also write the results here as JSON.");

namespace matmul::bench {
namespace {

using nlohmann::json;

json ToJson(const LatencyStats& s) {
  return {{"calls", s.calls},
          {"p50_us", s.p50_us},
          {"p90_us", s.p90_us},
          {"p99_us", s.p99_us},
          {"mean_us", s.mean_us}};
}

json ToJson(const ThroughputStats& s) {
  json j = {{"reps", s.reps},
            {"bytes_in", s.bytes_in},
            {"bytes_out", s.bytes_out},
            {"median_seconds", s.median_seconds},
            {"best_seconds", s.best_seconds},
            {"gb_per_second", s.gb_per_second}};
  if (s.median_kernel_seconds > 0) {
    j["median_kernel_seconds"] = s.median_kernel_seconds;
    j["gb_per_second_without_kernel"] = s.gb_per_second_without_kernel;
  }
  return j;
}

json ToJson(const MatmulLatency& m) {
  return {{"overhead", ToJson(m.overhead)},
          {"end_to_end", ToJson(m.end_to_end)},
          {"in_daemon", ToJson(m.in_daemon)},
          {"outside_daemon", ToJson(m.outside_daemon)},
          {"median_kernel_us", m.median_kernel_us}};
}

void PrintLatency(const std::string& name, const LatencyStats& s) {
  std::printf("  %-34s p50 %8.1f us  p90 %8.1f us  p99 %8.1f us\n",
              name.c_str(), s.p50_us, s.p90_us, s.p99_us);
}

void PrintThroughput(const std::string& name, const ThroughputStats& s) {
  std::printf("  %-34s %7.3f GB/s  (%.1f MB in, %.1f MB out, median %.1f ms",
              name.c_str(), s.gb_per_second, s.bytes_in / 1e6,
              s.bytes_out / 1e6, s.median_seconds * 1e3);
  if (s.median_kernel_seconds > 0) {
    std::printf(", kernel %.2f ms; %.3f GB/s without it",
                s.median_kernel_seconds * 1e3, s.gb_per_second_without_kernel);
  }
  std::printf(")\n");
}

// The small product with its operands where --small_mode puts them; keeps
// the session and region alive for as long as it lives.
struct SmallProduct {
  std::unique_ptr<Client> client;
  std::unique_ptr<Session> session;
  std::unique_ptr<SharedMemorySegment> segment;
  std::unique_ptr<CudaMemory> gpu;
  std::unique_ptr<RegisteredRegion> region;
  v1::MatmulRequest request;
};

absl::Status PrepareSmall(const std::string& target, const GemmShape& shape,
                          const std::string& mode, SmallProduct& small) {
  std::mt19937_64 rng(1);
  ASSIGN_OR_RETURN(
      v1::MatmulRequest inline_request,
      MakeRandomRequest(
          {.m = shape.m, .n = shape.n, .k = shape.k, .transpose_b = true},
          rng));
  if (mode == "inline") {
    small.request = std::move(inline_request);
    return absl::OkStatus();
  }
  if (mode != "shm" && mode != "ipc") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--small_mode is '", mode, "'; expected inline, shm or ipc"));
  }
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  ASSIGN_OR_RETURN(small.client, Client::Create(target));
  ASSIGN_OR_RETURN(small.session,
                   Session::Open(*small.client, "grpc-floor", timeout));
  ASSIGN_OR_RETURN(uint64_t bytes,
                   RegionBytesNeeded(inline_request, RegionPlacement{}));
  std::vector<char> staging;
  absl::Span<char> memory;
  if (mode == "shm") {
    ASSIGN_OR_RETURN(small.segment, SharedMemorySegment::Create(
                                        static_cast<int64_t>(bytes),
                                        absl::GetFlag(FLAGS_shm_prefix)));
    ASSIGN_OR_RETURN(small.region, RegisteredRegion::RegisterShm(
                                       *small.client, *small.session,
                                       *small.segment, 0, 0, timeout));
    small.segment->Unlink();
    memory = small.segment->bytes();
  } else {
    ASSIGN_OR_RETURN(small.gpu,
                     CudaMemory::Create(CudaMemory::Kind::kIpc,
                                        static_cast<int64_t>(bytes)));
    ASSIGN_OR_RETURN(small.region, RegisteredRegion::Register(
                                       *small.client, *small.session,
                                       small.gpu->RegisterRequest(), timeout));
    staging.resize(static_cast<size_t>(small.gpu->size_bytes()));
    memory = absl::MakeSpan(staging);
  }
  ASSIGN_OR_RETURN(
      RegionRequest placed,
      PlaceInRegion(inline_request, memory, small.region->id(),
                    small.session->session_id(), RegionPlacement{}));
  if (small.gpu != nullptr) RETURN_IF_ERROR(small.gpu->CopyFromHost(staging));
  small.request = std::move(placed.request);
  return absl::OkStatus();
}

absl::Status Run() {
  ASSIGN_OR_RETURN(GrpcTransportArgs transport,
                   ParseGrpcTransportArgs(absl::GetFlag(FLAGS_grpc_args)));
  ProbeOptions options;
  options.calls = absl::GetFlag(FLAGS_calls);
  options.warmup = absl::GetFlag(FLAGS_warmup);
  options.large_reps = absl::GetFlag(FLAGS_large_reps);
  options.timeout = absl::GetFlag(FLAGS_timeout);
  if (options.calls < 1 || options.warmup < 0 || options.large_reps < 1) {
    return absl::InvalidArgumentError(
        "--calls and --large_reps must be >= 1, --warmup >= 0");
  }
  std::vector<EchoApi> apis;
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_apis), ',', absl::SkipEmpty())) {
    if (name == "sync") {
      apis.push_back(EchoApi::kSync);
    } else if (name == "callback") {
      apis.push_back(EchoApi::kCallback);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--apis names '", name, "'; expected sync and/or callback"));
    }
  }
  if (apis.empty()) return absl::InvalidArgumentError("--apis is empty");
  const std::string large_text = absl::GetFlag(FLAGS_large_shape);
  std::optional<GemmShape> large;
  if (!large_text.empty()) {
    ASSIGN_OR_RETURN(large, ParseGemmShape(large_text));
  }
  ASSIGN_OR_RETURN(GemmShape small_shape,
                   ParseGemmShape(absl::GetFlag(FLAGS_small_shape)));

  json report;
  report["grpc_args"] = transport.ToString();
  std::printf(
      "grpc-floor (grpc args: %s)\n",
      transport.empty() ? "gRPC defaults" : transport.ToString().c_str());
  std::printf("bare gRPC echo, in process, unix socket:\n");
  // The first API measured is the one the daemon is compared against.
  LatencyStats floor_ping;
  ThroughputStats floor_echo;
  for (size_t i = 0; i < apis.size(); ++i) {
    const EchoApi api = apis[i];
    const std::string socket =
        absl::StrCat(absl::GetFlag(FLAGS_socket_dir), "/grpc-floor-", getpid(),
                     "-", EchoApiName(api), ".sock");
    ASSIGN_OR_RETURN(std::unique_ptr<EchoServer> server,
                     EchoServer::Start(api, socket, transport));
    std::shared_ptr<grpc::Channel> channel =
        OpenChannel(server->target(), transport);
    ASSIGN_OR_RETURN(
        LatencyStats ping,
        EchoPingPong(channel, absl::GetFlag(FLAGS_ping_bytes), options));
    PrintLatency(absl::StrCat("ping-pong, ", EchoApiName(api), " API"), ping);
    report["bare"][EchoApiName(api)]["ping_pong"] = ToJson(ping);
    if (i == 0) floor_ping = ping;
    if (large) {
      const int64_t a = large->m * large->k * 2;
      const int64_t b = large->n * large->k * 2;
      const int64_t c = large->m * large->n * 2;
      ASSIGN_OR_RETURN(ThroughputStats echo,
                       EchoThroughput(channel, {a, b}, c, options));
      PrintThroughput(absl::StrCat("echo of ", large_text, " BF16 sizes, ",
                                   EchoApiName(api)),
                      echo);
      report["bare"][EchoApiName(api)]["echo"] = ToJson(echo);
      if (i == 0) floor_echo = echo;
    }
  }
  report["floor_api"] = EchoApiName(apis.front());

  const std::string target = absl::GetFlag(FLAGS_target);
  if (!target.empty()) {
    std::printf("daemon %s, unary Matmul:\n", target.c_str());
    report["target"] = target;
    std::shared_ptr<grpc::Channel> channel = OpenChannel(target, transport);
    json comparison;
    auto compare_latency = [&](const std::string& name,
                               const MatmulLatency& m) {
      PrintLatency(absl::StrCat(name, ", e2e - kernel"), m.overhead);
      PrintLatency("  of it in the daemon", m.in_daemon);
      PrintLatency("  of it outside (gRPC, client)", m.outside_daemon);
      std::printf(
          "  %-34s %+8.1f us over the %s ping-pong p50 (%.2fx), kernel "
          "%.1f us\n",
          "", m.overhead.p50_us - floor_ping.p50_us, EchoApiName(apis.front()),
          m.overhead.p50_us / floor_ping.p50_us, m.median_kernel_us);
      comparison[name] = {
          {"overhead_p50_us", m.overhead.p50_us},
          {"floor_p50_us", floor_ping.p50_us},
          {"difference_us", m.overhead.p50_us - floor_ping.p50_us},
          {"ratio", m.overhead.p50_us / floor_ping.p50_us}};
    };

    SmallProduct tiny;
    RETURN_IF_ERROR(PrepareSmall(target, {1, 1, 1}, "inline", tiny));
    ASSIGN_OR_RETURN(MatmulLatency tiny_latency,
                     MatmulOverhead(channel, tiny.request, options));
    report["daemon"]["1x1x1_inline"] = ToJson(tiny_latency);
    compare_latency("1x1x1 inline", tiny_latency);

    const std::string small_mode = absl::GetFlag(FLAGS_small_mode);
    const std::string small_name =
        absl::StrCat(absl::GetFlag(FLAGS_small_shape), " NT ", small_mode);
    SmallProduct small;
    RETURN_IF_ERROR(PrepareSmall(target, small_shape, small_mode, small));
    ASSIGN_OR_RETURN(MatmulLatency small_latency,
                     MatmulOverhead(channel, small.request, options));
    report["daemon"][small_name] = ToJson(small_latency);
    report["small_product"] = small_name;
    compare_latency(small_name, small_latency);

    if (large) {
      std::mt19937_64 rng(2);
      ASSIGN_OR_RETURN(v1::MatmulRequest request,
                       MakeRandomRequest({.m = large->m,
                                          .n = large->n,
                                          .k = large->k,
                                          .transpose_b = true},
                                         rng));
      ASSIGN_OR_RETURN(ThroughputStats through,
                       MatmulThroughput(channel, request, options));
      const std::string name = absl::StrCat(large_text, " NT inline");
      PrintThroughput(name, through);
      std::printf(
          "  %-34s %.2fx the %s echo of the same sizes (%.2fx without the "
          "kernel)\n",
          "", through.gb_per_second / floor_echo.gb_per_second,
          EchoApiName(apis.front()),
          through.gb_per_second_without_kernel / floor_echo.gb_per_second);
      report["daemon"][name] = ToJson(through);
      report["large_product"] = name;
      comparison[name] = {
          {"gb_per_second", through.gb_per_second},
          {"floor_gb_per_second", floor_echo.gb_per_second},
          {"ratio", through.gb_per_second / floor_echo.gb_per_second}};
    }
    report["comparison"] = comparison;
  }

  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    std::ofstream out(json_path, std::ios::trunc);
    out << report.dump(2) << "\n";
    out.close();
    if (!out) {
      return absl::UnavailableError(absl::StrCat("cannot write ", json_path));
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace matmul::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Measures the daemon's unary Matmul against a bare gRPC echo in the "
      "same process.\nUsage: grpc-floor [--target=unix:/path] [--json=FILE] "
      "[--grpc_args=name=value,...]");
  matmul::HelpListsFlagsFrom("grpc_floor.cc");
  absl::ParseCommandLine(argc, argv);
  absl::Status status = matmul::bench::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "grpc-floor: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
