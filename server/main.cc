// matmul-server: the BF16 matmul daemon. See --help.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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
#include "absl/time/time.h"
#include "common/flags_help.h"
#include "common/grpc_transport_args.h"
#include "grpc/grpc.h"
#include "server/backends/backend_factory.h"
#include "server/matmul_server.h"

ABSL_FLAG(std::vector<std::string>, listen, {"unix:/run/matmul/matmul.sock"},
          "gRPC address(es) to serve on: unix:/path/to.sock, or host:port "
          "for TCP. Regions, sessions and request rings are served on unix "
          "sockets only; TCP carries inline products. Comma-separated or "
          "repeated.");
ABSL_FLAG(std::string, socket_mode, "0660",
          "Permission bits (octal) of the unix socket files: who may "
          "connect. Set before the socket accepts anyone.");
ABSL_FLAG(std::string, socket_group, "",
          "Group (name or gid) of the unix socket files, so that its "
          "members may connect (with --socket_mode 0660). Empty: the "
          "daemon's own group.");
ABSL_FLAG(bool, allow_shared_socket_dir, false,
          "Serve a unix socket in a directory that other users may write "
          "(such as /tmp), where they could replace it with their own.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain for the TCP listeners (with --tls_key).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key for --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificates: TCP clients must present a certificate "
          "signed by one of them (mutual TLS).");
ABSL_FLAG(bool, allow_insecure_tcp, false,
          "Serve plaintext TCP on addresses beyond loopback (without this, "
          "such a --listen needs --tls_cert and --tls_key).");
ABSL_FLAG(int, max_in_flight_per_client, 128,
          "Requests one client may have accepted and not yet answered "
          "(a client is a process on this host, or a remote host); beyond "
          "this its new requests get RESOURCE_EXHAUSTED, so that one "
          "client cannot fill the queue every client shares. 0: no limit.");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9466",
          "host:port for the Prometheus /metrics endpoint (loopback by "
          "default; 9400 is left to the DCGM exporter). Empty disables it.");
ABSL_FLAG(std::string, backend, "auto",
          "auto | cpu | cuda. auto picks cuda when a GPU is present, else "
          "cpu (OpenBLAS).");
ABSL_FLAG(int, cuda_device, 0, "CUDA device ordinal for --backend=cuda.");
ABSL_FLAG(std::string, cuda_devices, "",
          "Several GPUs in one daemon: \"all\" or ordinals \"0,1\" (each "
          "gets its own workers; products run on the GPU that holds their "
          "regions, inline ones on the least loaded). Overrides "
          "--cuda_device.");
ABSL_FLAG(std::string, tuning_cache, "",
          "JSON file where the CUDA backend keeps its per-shape kernel "
          "choices (empty: in memory only).");
ABSL_FLAG(int, max_shape_choices, 4096,
          "Shapes whose kernel choice the CUDA backend keeps, in memory and "
          "in --tuning_cache: beyond it the least recently used is "
          "forgotten (and tuned again when it comes back), so that clients "
          "sending ever-new shapes cannot grow the daemon.");
ABSL_FLAG(int, cpu_threads, 0,
          "CPU backend: OpenBLAS threads per product; 0 divides the cores "
          "among --worker_threads.");
ABSL_FLAG(int, worker_threads, 4,
          "Threads that launch batches. On the CUDA backend a worker queues "
          "a single product on a stream of its own and goes on to the next "
          "while a thread of the backend's notices the product's end and "
          "answers it (--launch_pipeline); a batch of several, a big "
          "product and any product on the CPU backend hold their worker "
          "until they are complete.");
ABSL_FLAG(int, cuda_streams, 0,
          "CUDA: products in flight at once per GPU (stream slots, each "
          "with a cuBLASLt workspace of 32 MiB); more callers wait for a "
          "free one. 0: four per worker thread.");
ABSL_FLAG(bool, launch_pipeline, true,
          "CUDA: a worker queues a single product and goes on to the next "
          "one while a thread of the backend's polls for its end; false: "
          "the worker waits for each launch itself.");
ABSL_FLAG(double, serial_min_gflop_per_sm, 1.0,
          "CUDA: products (or batches) of at least this many GFLOP per SM "
          "of the GPU run one after another on one stream that all workers "
          "share; smaller ones run on their worker's own stream, where they "
          "overlap (filling the SMs one product's last wave leaves idle, "
          "and the gaps between launches).");
ABSL_FLAG(std::string, stream_order_wait, "gpu",
          "gpu | cpu. How a stream-ordered product (MatmulRequest."
          "stream_order) waits for its client's CUDA stream: gpu, the worker "
          "queues a wait for the client's word on its stream and the product "
          "behind it, which then starts as soon as the client's stream gets "
          "there (no launch latency between a client's products); a product "
          "does so once every product its client's process numbered before "
          "it is launched, and waits on the CPU before that (and always when "
          "its client does not number its products); cpu, a worker polls "
          "the client's word and then launches the product.");
ABSL_FLAG(absl::Duration, stream_order_lapse, absl::Seconds(2),
          "How long the products of a client process wait for a lower "
          "number of the process that has not arrived before they stop "
          "waiting for it (it is refused, FAILED_PRECONDITION, should it "
          "come later). Until then they wait for their streams on the CPU.");
ABSL_FLAG(int, max_queue_size, 256,
          "Requests accepted but not yet running; beyond this new requests "
          "get RESOURCE_EXHAUSTED at once.");
ABSL_FLAG(int, max_batch_size, 32,
          "Most requests that share one launch. Requests batch when they "
          "agree on M, N, K, layouts, output dtype, alpha and beta and on "
          "where their operands live. 1 turns batching off.");
ABSL_FLAG(int64_t, worker_spin_us, 1000,
          "The longest an idle worker polls for the next request before it "
          "sleeps. One worker polls at a time, and only while requests come "
          "closer together than this (for about twice their recent gap): a "
          "request then skips the wake-up latency (tens of microseconds on "
          "some hosts), and an idle daemon keeps no core busy. 0: sleep at "
          "once.");
ABSL_FLAG(int64_t, ring_poll_spin_us, 2000,
          "The longest the poller of a shared-memory request ring "
          "(AttachRing) spins after a request before it sleeps on the "
          "ring's futex; as for --worker_spin_us, only while requests come "
          "closer together than this. 0: sleep at once.");
ABSL_FLAG(int, max_rings, 64,
          "Request rings attached at once (each has a poller thread).");
ABSL_FLAG(int, max_rings_per_session, 4,
          "Request rings one session (client process) may attach at once.");
ABSL_FLAG(int64_t, max_queue_delay_us, 0,
          "How long an idle worker may wait for a batch to fill, measured "
          "from its oldest request. 0: never wait; batches then hold what "
          "queued while every worker was busy (no added latency when idle, "
          "large batches under load).");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{256} << 20,
          "Largest gRPC message accepted or sent; larger requests get "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, max_dimension, int64_t{1} << 24,
          "Largest M, N, K or batch accepted.");
ABSL_FLAG(int, max_list_products, 32,
          "Most products in one product list (MatmulRequest.products); a "
          "longer list gets INVALID_ARGUMENT.");
ABSL_FLAG(int64_t, max_list_scratch_bytes, int64_t{256} << 20,
          "Most bytes of daemon scratch one product list may use (device "
          "memory on a GPU, held while the list runs); a list asking for "
          "more gets INVALID_ARGUMENT.");
ABSL_FLAG(int, max_metric_shapes, 64,
          "Distinct shapes that get their own metric series; later shapes "
          "are counted under shape=\"other\".");
ABSL_FLAG(std::string, shm_prefix, "matmul",
          "Shared-memory regions must be named with this prefix (POSIX shm "
          "names, no '/'), so clients can reach no other shm object.");
ABSL_FLAG(bool, allow_other_shm_owners, false,
          "Serve shared-memory segments and request rings whose owner is "
          "not the calling user (by default a segment must belong to its "
          "caller, or the caller be root): only where every local user "
          "may read every other's tensors.");
ABSL_FLAG(int, max_regions_per_session, 4096,
          "Regions one session (client) may register at once.");
ABSL_FLAG(int64_t, max_region_bytes_per_session, int64_t{1} << 40,
          "Bytes of regions one session may register at once.");
ABSL_FLAG(int64_t, test_only_inject_gpu_fault_after, 0,
          "TEST ONLY, never in production: the Nth product launched on the "
          "GPU (from 1) runs a kernel that writes out of range instead, "
          "which poisons the CUDA context; the daemon must then turn "
          "NOT_SERVING, answer UNAVAILABLE and exit with code 3. 0: off.");
ABSL_FLAG(int64_t, test_only_gpu_memory_headroom_bytes, 0,
          "TEST ONLY, never in production: at start-up take all but this "
          "many bytes of the GPU's free memory, so that a larger product "
          "fails in cudaMalloc (RESOURCE_EXHAUSTED). 0: off.");
ABSL_FLAG(double, caller_thread_max_mflop, 64,
          "With --unary_api=sync or callback_run_small, unary calls run "
          "products of up to this "
          "many MFLOP (2*M*N*K/1e6) on their own gRPC thread when a worker "
          "is idle and nothing is queued, instead of handing them to a "
          "worker and back. 0: always hand off.");
ABSL_FLAG(std::string, unary_api, "callback",
          "gRPC API of unary Matmul calls: callback, or sync (each call "
          "answered on the thread that received it, which runs small "
          "products itself, --caller_thread_max_mflop; one thread per call "
          "in flight; a request that does not parse then gets gRPC's own "
          "error), or callback_run_small (the callback API, whose receiving "
          "thread runs small products itself; other calls' I/O on that "
          "thread waits meanwhile: for a daemon with one caller at a time). "
          "MatmulStream and the other methods stay on the callback API.");
ABSL_FLAG(std::string, grpc_args, "",
          "gRPC transport settings, name=value,...: flow_control_window "
          "(the initial HTTP/2 stream window), max_frame_size, bdp_probe "
          "(0 or 1), write_buffer_size, read_chunk_size, "
          "max_read_chunk_size, resource_quota_bytes, or any grpc.* "
          "argument. Clients get the best large-message throughput with "
          "the same settings on their channel. Empty: gRPC's defaults.");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(30),
          "On SIGTERM/SIGINT, how long requests in flight may take to "
          "finish. Past it, those left are answered UNAVAILABLE (listed on "
          "stderr) and the daemon exits 0, waiting at most 3 s more for a "
          "kernel that is still running.");

namespace {

// "0660" -> 0660: the mode is always read as octal, as chmod reads it.
absl::StatusOr<mode_t> ParseSocketMode(const std::string& text) {
  mode_t mode = 0;
  if (text.empty() || text.size() > 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--socket_mode '", text, "' is not an octal mode such as 0660"));
  }
  for (char digit : text) {
    if (digit < '0' || digit > '7') {
      return absl::InvalidArgumentError(absl::StrCat(
          "--socket_mode '", text, "' is not an octal mode such as 0660"));
    }
    mode = mode * 8 + static_cast<mode_t>(digit - '0');
  }
  if (mode > 0777) {
    return absl::InvalidArgumentError(
        absl::StrCat("--socket_mode '", text, "' has bits beyond 0777"));
  }
  return mode;
}

// The exit code after the GPU was lost (distinct from a start-up error, 1,
// and a usage error, 2), for supervisors to tell a crash-restart apart.
constexpr int kDeviceLostExitCode = 3;

// absl replaces a vector flag on each occurrence; collect every --listen
// so that the flag can be repeated as well as comma-separated.
std::vector<std::string> AllListenAddresses(int argc, char** argv) {
  std::vector<std::string> addresses;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    absl::string_view value;
    if (absl::ConsumePrefix(&arg, "--listen=") ||
        absl::ConsumePrefix(&arg, "-listen=")) {
      value = arg;
    } else if ((arg == "--listen" || arg == "-listen") && i + 1 < argc) {
      value = argv[++i];
    } else {
      continue;
    }
    for (absl::string_view part :
         absl::StrSplit(value, ',', absl::SkipEmpty())) {
      addresses.emplace_back(part);
    }
  }
  if (addresses.empty()) addresses = absl::GetFlag(FLAGS_listen);
  return addresses;
}

}  // namespace

int main(int argc, char** argv) {
  // Debian's abseil is built without NDEBUG, which turns on the mutex
  // deadlock detector: every Lock then takes one process-wide lock, and
  // the request path's threads queue on it. The tests keep it on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::SetProgramUsageMessage(
      "The BF16 matmul daemon: serves C = alpha*op(A)*op(B) + beta*C over "
      "gRPC (matmul.v1.MatmulService, plus grpc.health.v1 and reflection) "
      "and exports Prometheus metrics.\n\n"
      "  matmul-server                           # "
      "unix:/run/matmul/matmul.sock, "
      "best backend\n"
      "  matmul-server --backend=cpu --listen=unix:/run/matmul.sock\n"
      "  matmul-server --listen=127.0.0.1:50051 --metrics_listen=:9466\n\n"
      "SIGTERM or SIGINT stops it gracefully: health turns NOT_SERVING, new "
      "calls are refused, every accepted request is answered, exit 0.");
  matmul::HelpListsFlagsFrom("server/main.cc");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr,
                 "matmul-server: unexpected argument '%s'; see --help\n",
                 positional[1]);
    return 2;
  }

  // Block the stop signals before any thread starts so that only sigwait
  // below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  // Raised by the daemon itself when a GPU is lost (on_device_lost below).
  sigaddset(&stop_signals, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // gRPC stays initialized until the process exits, never shut down. The
  // library's shutdown runs in the destructor of whoever holds its last
  // reference (the server, unless main holds one) and joins gRPC's
  // threads, one of which may sleep in its poller until a timer seconds
  // away: a teardown bounded by the shutdown grace cannot wait for that.
  grpc_init();

  matmul::BackendOptions backend_options;
  backend_options.kind = absl::GetFlag(FLAGS_backend);
  backend_options.cuda.device = absl::GetFlag(FLAGS_cuda_device);
  backend_options.cuda_devices = absl::GetFlag(FLAGS_cuda_devices);
  backend_options.cuda.selector.tuning_cache =
      absl::GetFlag(FLAGS_tuning_cache);
  backend_options.cuda.selector.max_shape_choices =
      absl::GetFlag(FLAGS_max_shape_choices);
  if (backend_options.cuda.selector.max_shape_choices < 1) {
    std::fprintf(stderr,
                 "matmul-server: --max_shape_choices is %d; expected at least "
                 "1\n",
                 backend_options.cuda.selector.max_shape_choices);
    return 2;
  }
  backend_options.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  // Workers that do not wait for their products keep several each in
  // flight.
  backend_options.cuda.streams =
      absl::GetFlag(FLAGS_cuda_streams) > 0
          ? absl::GetFlag(FLAGS_cuda_streams)
          : 4 * std::max(1, absl::GetFlag(FLAGS_worker_threads));
  backend_options.cuda.pipeline = absl::GetFlag(FLAGS_launch_pipeline);
  backend_options.cuda.completion_idle_spin =
      absl::Microseconds(absl::GetFlag(FLAGS_worker_spin_us));
  backend_options.cuda.schedule.serial_min_gflop_per_sm =
      absl::GetFlag(FLAGS_serial_min_gflop_per_sm);
  const std::string stream_order_wait = absl::GetFlag(FLAGS_stream_order_wait);
  if (stream_order_wait != "cpu" && stream_order_wait != "gpu") {
    std::fprintf(stderr,
                 "matmul-server: --stream_order_wait is '%s'; expected cpu or "
                 "gpu\n",
                 stream_order_wait.c_str());
    return 2;
  }
  backend_options.cuda.stream_order_waits_on_gpu = stream_order_wait == "gpu";
  backend_options.cuda.schedule.test_only_inject_fault_after =
      absl::GetFlag(FLAGS_test_only_inject_gpu_fault_after);
  backend_options.cuda.test_only_memory_headroom_bytes =
      absl::GetFlag(FLAGS_test_only_gpu_memory_headroom_bytes);
  if (backend_options.cpu_threads <= 0) {
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    backend_options.cpu_threads =
        std::max(1, cores / std::max(1, absl::GetFlag(FLAGS_worker_threads)));
  }
  absl::StatusOr<std::vector<std::unique_ptr<matmul::GemmBackend>>> backends =
      matmul::CreateBackends(backend_options);
  if (!backends.ok()) {
    std::fprintf(stderr, "matmul-server: %s\n",
                 backends.status().ToString().c_str());
    return 1;
  }

  matmul::ServerOptions options;
  options.listen = AllListenAddresses(argc, argv);
  absl::StatusOr<mode_t> socket_mode =
      ParseSocketMode(absl::GetFlag(FLAGS_socket_mode));
  if (!socket_mode.ok()) {
    std::fprintf(stderr, "matmul-server: %s\n",
                 socket_mode.status().ToString().c_str());
    return 2;
  }
  options.unix_socket.mode = *socket_mode;
  if (const std::string group = absl::GetFlag(FLAGS_socket_group);
      !group.empty()) {
    absl::StatusOr<gid_t> gid = matmul::ParseGroup(group);
    if (!gid.ok()) {
      std::fprintf(stderr, "matmul-server: %s\n",
                   gid.status().ToString().c_str());
      return 2;
    }
    options.unix_socket.group = *gid;
  }
  options.unix_socket.allow_shared_directory =
      absl::GetFlag(FLAGS_allow_shared_socket_dir);
  // The default socket's directory (/run/matmul) is the daemon's to make.
  options.unix_socket.create_directory =
      options.listen == matmul::ServerOptions().listen;
  options.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.allow_insecure_tcp = absl::GetFlag(FLAGS_allow_insecure_tcp);
  options.max_in_flight_per_client =
      absl::GetFlag(FLAGS_max_in_flight_per_client);
  options.regions.max_rings_per_session =
      absl::GetFlag(FLAGS_max_rings_per_session);
  options.regions.stream_order_lapse = absl::GetFlag(FLAGS_stream_order_lapse);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.max_metric_shapes = absl::GetFlag(FLAGS_max_metric_shapes);
  options.executor.worker_threads = absl::GetFlag(FLAGS_worker_threads);
  options.executor.batching.max_queue_size =
      absl::GetFlag(FLAGS_max_queue_size);
  options.executor.batching.max_batch_size =
      absl::GetFlag(FLAGS_max_batch_size);
  options.executor.batching.max_queue_delay =
      absl::Microseconds(absl::GetFlag(FLAGS_max_queue_delay_us));
  options.executor.batching.idle_spin =
      absl::Microseconds(absl::GetFlag(FLAGS_worker_spin_us));
  options.limits.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.limits.max_dimension = absl::GetFlag(FLAGS_max_dimension);
  options.limits.max_list_products = absl::GetFlag(FLAGS_max_list_products);
  options.limits.max_list_scratch_bytes =
      absl::GetFlag(FLAGS_max_list_scratch_bytes);
  if (options.limits.max_list_products < 1 ||
      options.limits.max_list_scratch_bytes < 0) {
    std::fprintf(stderr,
                 "matmul-server: --max_list_products is %d and "
                 "--max_list_scratch_bytes %lld; expected at least 1 and at "
                 "least 0\n",
                 options.limits.max_list_products,
                 static_cast<long long>(options.limits.max_list_scratch_bytes));
    return 2;
  }
  options.shm_prefix = absl::GetFlag(FLAGS_shm_prefix);
  options.allow_other_shm_owners = absl::GetFlag(FLAGS_allow_other_shm_owners);
  options.rings.poll_spin =
      absl::Microseconds(absl::GetFlag(FLAGS_ring_poll_spin_us));
  options.rings.max_rings = absl::GetFlag(FLAGS_max_rings);
  options.regions.max_regions_per_session =
      absl::GetFlag(FLAGS_max_regions_per_session);
  options.regions.max_bytes_per_session =
      absl::GetFlag(FLAGS_max_region_bytes_per_session);
  absl::StatusOr<matmul::GrpcTransportArgs> grpc_args =
      matmul::ParseGrpcTransportArgs(absl::GetFlag(FLAGS_grpc_args));
  if (!grpc_args.ok()) {
    std::fprintf(stderr, "matmul-server: --grpc_args: %s\n",
                 grpc_args.status().ToString().c_str());
    return 2;
  }
  options.grpc_transport = *std::move(grpc_args);
  const std::string unary_api = absl::GetFlag(FLAGS_unary_api);
  if (unary_api == "callback") {
    options.unary_api = matmul::UnaryApi::kCallback;
  } else if (unary_api == "sync") {
    options.unary_api = matmul::UnaryApi::kSync;
  } else if (unary_api == "callback_run_small") {
    options.unary_api = matmul::UnaryApi::kCallbackRunSmall;
  } else {
    std::fprintf(stderr,
                 "matmul-server: --unary_api is '%s'; expected callback, "
                 "sync or callback_run_small\n",
                 unary_api.c_str());
    return 2;
  }
  options.caller_thread_max_flops =
      absl::GetFlag(FLAGS_caller_thread_max_mflop) * 1e6;
  options.on_device_lost = [](const absl::Status& status) {
    std::fprintf(stderr, "matmul-server: %s\n", status.ToString().c_str());
    kill(getpid(), SIGUSR2);
  };
  absl::StatusOr<std::unique_ptr<matmul::MatmulServer>> server =
      matmul::MatmulServer::Create(options, *std::move(backends));
  if (!server.ok()) {
    std::fprintf(stderr, "matmul-server: %s\n",
                 server.status().ToString().c_str());
    return 1;
  }
  std::string listening;
  for (size_t i = 0; i < options.listen.size(); ++i) {
    int port = (*server)->bound_ports()[i];
    listening += (i ? ", " : "") + options.listen[i] +
                 (port > 0 ? " (port " + std::to_string(port) + ")" : "");
  }
  std::fprintf(stderr,
               "matmul-server %s: backend %s (%zu device%s), listening on %s, "
               "metrics on %s\n",
               MATMUL_VERSION, (*server)->backend().name().c_str(),
               (*server)->lanes().size(),
               (*server)->lanes().size() == 1 ? "" : "s", listening.c_str(),
               options.metrics_listen.empty()
                   ? "(disabled)"
                   : ("http://" + options.metrics_listen + "/metrics").c_str());

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  if (signal_number == SIGUSR2) {
    // Health is NOT_SERVING already and the lost lane answers everything
    // UNAVAILABLE, so the drain is quick. The exit skips destructors: the
    // CUDA objects' would run on a poisoned context.
    std::fprintf(stderr,
                 "matmul-server: GPU lost, health is NOT_SERVING; answering "
                 "what is queued, then exiting with code %d for the "
                 "supervisor to restart the daemon\n",
                 kDeviceLostExitCode);
    (*server)->Shutdown(
        std::min(absl::GetFlag(FLAGS_shutdown_grace), absl::Seconds(5)));
    std::fflush(stderr);
    std::_Exit(kDeviceLostExitCode);
  }
  std::fprintf(stderr, "matmul-server: %s received, draining\n",
               strsignal(signal_number));
  // Past the grace every request is answered, but a kernel already running
  // cannot be stopped, and a worker stuck in one would hold the exit
  // forever (a supervisor's SIGKILL then): the drain and the teardown that
  // joins the workers get this much longer together, then the daemon exits
  // without them.
  constexpr absl::Duration kRunningKernelMargin = absl::Seconds(3);
  const absl::Duration grace = absl::GetFlag(FLAGS_shutdown_grace);
  const absl::Time deadline = absl::Now() + grace + kRunningKernelMargin;
  // The main thread may give up on the drain and read what is in flight:
  // the server is torn down only once the drain ended and nobody gave up.
  absl::Mutex mu;
  bool drained = false;  // guarded by mu
  bool gave_up = false;  // guarded by mu
  absl::Notification torn_down;
  std::thread drain([&server, grace, &mu, &drained, &gave_up, &torn_down] {
    (*server)->Shutdown(grace);
    {
      absl::MutexLock lock(&mu);
      if (gave_up) return;
      drained = true;
    }
    server->reset();
    torn_down.Notify();
  });
  if (!mu.LockWhenWithDeadline(absl::Condition(&drained), deadline)) {
    gave_up = true;
    std::fprintf(stderr,
                 "matmul-server: a worker is still running a product %s "
                 "after the shutdown grace; exiting without it. In flight:\n"
                 "%s",
                 absl::FormatDuration(kRunningKernelMargin).c_str(),
                 (*server)->in_flight().Render().c_str());
    std::fflush(stderr);
    std::_Exit(0);
  }
  mu.Unlock();
  if (!torn_down.WaitForNotificationWithDeadline(deadline)) {
    // Every request has its answer; only a worker's last product is left.
    std::fprintf(stderr,
                 "matmul-server: every request is answered, but a worker is "
                 "still running a product %s after the shutdown grace; "
                 "exiting without it\n",
                 absl::FormatDuration(kRunningKernelMargin).c_str());
    std::fflush(stderr);
    std::_Exit(0);
  }
  drain.join();
  std::fprintf(stderr, "matmul-server: stopped\n");
  return 0;
}
