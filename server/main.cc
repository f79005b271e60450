// matmul-server: the BF16 matmul daemon. See --help.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/flags_help.h"
#include "grpc/grpc.h"
#include "server/backends/backend_factory.h"
#include "server/daemon_flags.h"
#include "server/matmul_server.h"

namespace {

// The exit code after the GPU was lost (distinct from a start-up error, 1,
// and a usage error, 2), for supervisors to tell a crash-restart apart.
constexpr int kDeviceLostExitCode = 3;

// Where /metrics is served, with the port the endpoint bound (port 0 in
// --metrics_listen picks one).
std::string MetricsAddress(const std::string& listen, int port) {
  if (listen.empty()) return "(disabled)";
  const std::string host = listen.substr(0, listen.rfind(':'));
  return "http://" + host + ":" + std::to_string(port) + "/metrics";
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
  matmul::HelpListsFlagsFrom(matmul::kDaemonFlagsFile);
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

  absl::StatusOr<matmul::DaemonSettings> settings =
      matmul::SettingsFromFlags(argc, argv);
  if (!settings.ok()) {
    std::fprintf(stderr, "matmul-server: %s\n",
                 std::string(settings.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<std::vector<std::unique_ptr<matmul::GemmBackend>>> backends =
      matmul::CreateBackends(settings->backend);
  if (!backends.ok()) {
    std::fprintf(stderr, "matmul-server: %s\n",
                 backends.status().ToString().c_str());
    return 1;
  }
  matmul::ServerOptions& options = settings->server;
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
  std::fprintf(
      stderr,
      "matmul-server %s: backend %s (%zu device%s), listening on %s, "
      "metrics on %s\n",
      MATMUL_VERSION, (*server)->backend().name().c_str(),
      (*server)->lanes().size(), (*server)->lanes().size() == 1 ? "" : "s",
      listening.c_str(),
      MetricsAddress(options.metrics_listen, (*server)->metrics().http_port())
          .c_str());

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
    (*server)->Shutdown(std::min(settings->shutdown_grace, absl::Seconds(5)));
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
  const absl::Duration grace = settings->shutdown_grace;
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
