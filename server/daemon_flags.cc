#include "server/daemon_flags.h"

#include <sys/types.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/grpc_transport_args.h"

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
          "a launch (one product, or a batch of several as one) on a stream "
          "of its own and goes on to the next while a thread of the "
          "backend's notices its end and answers it (--launch_pipeline); "
          "a big product (or a batch of products that each fill the GPU) "
          "and any product on the CPU backend hold their worker until they "
          "are complete.");
ABSL_FLAG(int, cuda_streams, 0,
          "CUDA: products in flight at once per GPU (stream slots, each "
          "with a cuBLASLt workspace of 32 MiB); more callers wait for a "
          "free one. 0: four per worker thread.");
ABSL_FLAG(bool, launch_pipeline, true,
          "CUDA: a worker queues a launch and goes on to the next one while "
          "a thread of the backend's polls for its end; false: the worker "
          "waits for each launch itself.");
ABSL_FLAG(std::string, completion_poll, "query",
          "query | word. CUDA: how the backend's thread notices a queued "
          "launch's end: query, cudaStreamQuery on the launch's stream at "
          "each poll; word, the stream writes a counter into pinned host "
          "memory after the launch and the thread reads it, asking the "
          "stream only now and then (a failed stream never writes it), so "
          "that polling makes no CUDA call for launches to contend with "
          "(needs the driver's stream memory operations; query otherwise).");
ABSL_FLAG(int, completion_threads, 1,
          "CUDA: threads that notice queued launches' ends and complete "
          "them, answers included, each for every n-th launch; more than "
          "one where one thread cannot keep up with the GPU (its busy time "
          "is matmul_completion_thread_seconds_total). Each polls while it "
          "has launches out.");
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
ABSL_FLAG(int, launches_in_flight_per_key, 0,
          "CUDA: launches of one batch key (requests that may share a "
          "launch, see --max_batch_size) on the GPU at once. While that "
          "many are, the key's next requests wait in the queue and go out "
          "together, as one launch, when one of them is complete: under "
          "load batches grow instead of the GPU's queue. Keys whose "
          "products run alone (each fills the GPU, or waits for its "
          "client's stream) are not bounded. 0 (the default): no bound, "
          "each worker launches what it takes at once; a bound pays off "
          "only where a launch costs the worker little beside the GPU's "
          "time for it.");
ABSL_FLAG(int64_t, worker_spin_us, 1000,
          "The longest an idle worker polls for the next request before it "
          "sleeps. One worker polls at a time, and only while requests come "
          "closer together than this (for about twice their recent gap): a "
          "request then skips the wake-up latency (tens of microseconds on "
          "some hosts), and an idle daemon keeps no core busy. 0: sleep at "
          "once.");
ABSL_FLAG(int, ring_pollers, 2,
          "Threads that take requests from the shared-memory request rings "
          "(AttachRing). Each serves the rings it is given, a ring going to "
          "the one with the fewest; a thread per client would keep as many "
          "cores busy as there are clients.");
ABSL_FLAG(int64_t, ring_poll_spin_us, 2000,
          "The longest a ring poller spins after a request before it "
          "sleeps on its rings' futexes; as for --worker_spin_us, only "
          "while requests come closer together than this. 0: sleep at "
          "once.");
ABSL_FLAG(int, max_rings, 64, "Request rings attached at once.");
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

namespace matmul {

absl::StatusOr<DaemonSettings> SettingsFromFlags(int argc, char** argv) {
  DaemonSettings settings;
  BackendOptions& backend = settings.backend;
  backend.kind = absl::GetFlag(FLAGS_backend);
  backend.cuda.device = absl::GetFlag(FLAGS_cuda_device);
  backend.cuda_devices = absl::GetFlag(FLAGS_cuda_devices);
  backend.cuda.selector.tuning_cache = absl::GetFlag(FLAGS_tuning_cache);
  backend.cuda.selector.max_shape_choices =
      absl::GetFlag(FLAGS_max_shape_choices);
  if (backend.cuda.selector.max_shape_choices < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_shape_choices is ", backend.cuda.selector.max_shape_choices,
        "; expected at least 1"));
  }
  const int worker_threads = absl::GetFlag(FLAGS_worker_threads);
  backend.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  if (backend.cpu_threads <= 0) {
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    backend.cpu_threads = std::max(1, cores / std::max(1, worker_threads));
  }
  // Workers that do not wait for their products keep several each in
  // flight.
  backend.cuda.streams = absl::GetFlag(FLAGS_cuda_streams) > 0
                             ? absl::GetFlag(FLAGS_cuda_streams)
                             : 4 * std::max(1, worker_threads);
  backend.cuda.launch_pipeline = absl::GetFlag(FLAGS_launch_pipeline);
  backend.cuda.completion_idle_spin =
      absl::Microseconds(absl::GetFlag(FLAGS_worker_spin_us));
  const std::string completion_poll = absl::GetFlag(FLAGS_completion_poll);
  if (completion_poll != "query" && completion_poll != "word") {
    return absl::InvalidArgumentError(
        absl::StrCat("--completion_poll is '", completion_poll,
                     "'; expected query or word"));
  }
  backend.cuda.completion_by_word = completion_poll == "word";
  backend.cuda.completion_threads = absl::GetFlag(FLAGS_completion_threads);
  if (backend.cuda.completion_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--completion_threads is ",
                     backend.cuda.completion_threads, "; expected >= 1"));
  }
  backend.cuda.serial_min_gflop_per_sm =
      absl::GetFlag(FLAGS_serial_min_gflop_per_sm);
  const std::string stream_order_wait = absl::GetFlag(FLAGS_stream_order_wait);
  if (stream_order_wait != "cpu" && stream_order_wait != "gpu") {
    return absl::InvalidArgumentError(absl::StrCat("--stream_order_wait is '",
                                                   stream_order_wait,
                                                   "'; expected cpu or gpu"));
  }
  backend.cuda.stream_order_waits_on_gpu = stream_order_wait == "gpu";
  backend.cuda.test_only_inject_fault_after =
      absl::GetFlag(FLAGS_test_only_inject_gpu_fault_after);
  backend.cuda.test_only_memory_headroom_bytes =
      absl::GetFlag(FLAGS_test_only_gpu_memory_headroom_bytes);

  ServerOptions& options = settings.server;
  options.listen = AllListenAddresses(argc, argv);
  absl::StatusOr<mode_t> socket_mode =
      ParseSocketMode(absl::GetFlag(FLAGS_socket_mode));
  if (!socket_mode.ok()) return socket_mode.status();
  options.unix_socket.mode = *socket_mode;
  if (const std::string group = absl::GetFlag(FLAGS_socket_group);
      !group.empty()) {
    absl::StatusOr<gid_t> gid = ParseGroup(group);
    if (!gid.ok()) return gid.status();
    options.unix_socket.group = *gid;
  }
  options.unix_socket.allow_shared_directory =
      absl::GetFlag(FLAGS_allow_shared_socket_dir);
  // The default socket's directory (/run/matmul) is the daemon's to make.
  options.unix_socket.create_directory =
      options.listen == ServerOptions().listen;
  options.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.allow_insecure_tcp = absl::GetFlag(FLAGS_allow_insecure_tcp);
  options.service.admission.max_in_flight_per_client =
      absl::GetFlag(FLAGS_max_in_flight_per_client);
  options.regions.max_rings_per_session =
      absl::GetFlag(FLAGS_max_rings_per_session);
  options.regions.stream_order_lapse = absl::GetFlag(FLAGS_stream_order_lapse);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.max_metric_shapes = absl::GetFlag(FLAGS_max_metric_shapes);
  options.executor.worker_threads = worker_threads;
  options.executor.batching.max_queue_size =
      absl::GetFlag(FLAGS_max_queue_size);
  options.executor.batching.max_batch_size =
      absl::GetFlag(FLAGS_max_batch_size);
  options.executor.batching.max_queue_delay =
      absl::Microseconds(absl::GetFlag(FLAGS_max_queue_delay_us));
  options.executor.batching.launches_in_flight_per_key =
      absl::GetFlag(FLAGS_launches_in_flight_per_key);
  options.executor.batching.worker_spin =
      absl::Microseconds(absl::GetFlag(FLAGS_worker_spin_us));
  options.service.admission.limits.max_message_bytes =
      absl::GetFlag(FLAGS_max_message_bytes);
  options.service.admission.limits.max_dimension =
      absl::GetFlag(FLAGS_max_dimension);
  options.service.admission.limits.max_list_products =
      absl::GetFlag(FLAGS_max_list_products);
  options.service.admission.limits.max_list_scratch_bytes =
      absl::GetFlag(FLAGS_max_list_scratch_bytes);
  if (options.service.admission.limits.max_list_products < 1 ||
      options.service.admission.limits.max_list_scratch_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_list_products is ",
                     options.service.admission.limits.max_list_products,
                     " and --max_list_scratch_bytes ",
                     options.service.admission.limits.max_list_scratch_bytes,
                     "; expected at least 1 and at least 0"));
  }
  options.service.shm.prefix = absl::GetFlag(FLAGS_shm_prefix);
  options.service.shm.allow_other_owners =
      absl::GetFlag(FLAGS_allow_other_shm_owners);
  options.service.rings.pollers = absl::GetFlag(FLAGS_ring_pollers);
  if (options.service.rings.pollers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ring_pollers is ", options.service.rings.pollers,
                     "; expected at least 1"));
  }
  options.service.rings.poll_spin =
      absl::Microseconds(absl::GetFlag(FLAGS_ring_poll_spin_us));
  options.service.rings.max_rings = absl::GetFlag(FLAGS_max_rings);
  options.regions.max_regions_per_session =
      absl::GetFlag(FLAGS_max_regions_per_session);
  options.regions.max_region_bytes_per_session =
      absl::GetFlag(FLAGS_max_region_bytes_per_session);
  absl::StatusOr<GrpcTransportArgs> grpc_args =
      ParseGrpcTransportArgs(absl::GetFlag(FLAGS_grpc_args));
  if (!grpc_args.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grpc_args: ", grpc_args.status().message()));
  }
  options.grpc_args = *std::move(grpc_args);
  const std::string unary_api = absl::GetFlag(FLAGS_unary_api);
  if (unary_api == "callback") {
    options.service.unary_api = UnaryApi::kCallback;
  } else if (unary_api == "sync") {
    options.service.unary_api = UnaryApi::kSync;
  } else if (unary_api == "callback_run_small") {
    options.service.unary_api = UnaryApi::kCallbackRunSmall;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--unary_api is '", unary_api,
                     "'; expected callback, sync or callback_run_small"));
  }
  options.service.admission.caller_thread_max_mflop =
      absl::GetFlag(FLAGS_caller_thread_max_mflop);
  settings.shutdown_grace = absl::GetFlag(FLAGS_shutdown_grace);
  return settings;
}

}  // namespace matmul
