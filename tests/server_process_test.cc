// The real binaries: matmul-server started as a process on a temporary unix
// socket, probed with the standard grpc.health.v1 client, driven by
// matmul-cli, and stopped with SIGTERM while requests are in flight.
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/regions/region_request_builder.h"
#include "client/regions/registered_region.h"
#include "client/regions/shared_memory_segment.h"
#include "client/request_builder.h"
#include "client/session.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/test_daemon.h"

extern char** environ;

namespace matmul {
namespace {

// A child process that is killed (if still running) and reaped on scope exit.
class ChildProcess {
 public:
  explicit ChildProcess(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const std::string& arg : argv)
      args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], nullptr, nullptr, args.data(), environ) !=
        0) {
      pid_ = -1;
    }
  }
  ~ChildProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      Wait();
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool started() const { return pid_ > 0; }
  void Signal(int signal_number) { kill(pid_, signal_number); }
  // The exit status as waitpid reports it; reaps the child.
  int Wait() {
    int status = -1;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
};

// Runs a command to completion and returns its exit code.
int RunCommand(const std::vector<std::string>& argv) {
  ChildProcess child(argv);
  if (!child.started()) return -1;
  int status = child.Wait();
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

grpc::health::v1::HealthCheckResponse::ServingStatus Health(
    const std::string& target) {
  auto channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  context.set_wait_for_ready(true);
  grpc::health::v1::HealthCheckRequest request;  // "" = the whole server
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = stub->Check(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.status();
}

TEST(ServerProcessTest, HealthCliCheckAndGracefulStop) {
  const std::string socket = FreshSocketPath();
  const std::string target = "unix:" + socket;
  ChildProcess server({MATMUL_SERVER_PATH, "--backend=cpu",
                       "--listen=" + target,
                       "--metrics_listen=", "--worker_threads=1"});
  ASSERT_TRUE(server.started());
  EXPECT_EQ(Health(target), grpc::health::v1::HealthCheckResponse::SERVING);

  // The acceptance command.
  EXPECT_EQ(RunCommand({MATMUL_CLI_PATH, "run", "--target=" + target,
                        "--shape=127x255x63", "--check"}),
            0);

  // Requests in flight when SIGTERM arrives are all answered.
  ClientOptions options;
  options.wait_for_ready = true;
  auto client = Client::Create(target, options);
  ASSERT_TRUE(client.ok());
  std::mt19937_64 rng(3);
  std::vector<v1::MatmulRequest> requests;
  std::vector<std::future<absl::StatusOr<v1::MatmulResponse>>> in_flight;
  for (int i = 0; i < 6; ++i) {
    auto request = MakeRandomRequest({.m = 700, .n = 600, .k = 500}, rng);
    ASSERT_TRUE(request.ok());
    request->set_request_id(i);
    requests.push_back(*request);
    in_flight.push_back((*client)->MatmulFuture(*request, absl::Seconds(60)));
  }
  absl::SleepFor(absl::Milliseconds(100));
  server.Signal(SIGTERM);
  for (auto& future : in_flight) {
    absl::StatusOr<v1::MatmulResponse> response = future.get();
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_LT(*CheckResponse(requests[response->request_id()], *response),
              1e-2);
  }
  const int status = server.Wait();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A drain ends with its grace: products still queued then are answered
// UNAVAILABLE, saying why, and the daemon exits 0 soon after, however much
// work it had queued.
TEST(ServerProcessTest, ADrainEndsWithItsGrace) {
  const std::string socket = FreshSocketPath();
  const std::string target = "unix:" + socket;
  // One worker on one core, one product per launch: the products sent
  // below take many seconds, many times the grace even where the CPU
  // backend is fastest.
  ChildProcess server(
      {MATMUL_SERVER_PATH, "--backend=cpu", "--listen=" + target,
       "--metrics_listen=", "--worker_threads=1", "--cpu_threads=1",
       "--max_batch_size=1", "--shutdown_grace=1s"});
  ASSERT_TRUE(server.started());
  ClientOptions options;
  options.wait_for_ready = true;
  auto client = Client::Create(target, options);
  ASSERT_TRUE(client.ok());
  // The operands sit in a shared-memory region, so that every request is
  // a few hundred bytes and all of them are admitted before the signal
  // (inline operands of this size take long to send on a loaded machine).
  auto session = Session::Open(**client, "drain_test");
  ASSERT_TRUE(session.ok()) << session.status();
  std::mt19937_64 rng(std::random_device{}());
  constexpr int kProducts = 16;
  constexpr int64_t kDim = 3072;
  // A and B, BF16.
  auto segment = SharedMemorySegment::Create(int64_t{4} * kDim * kDim);
  ASSERT_TRUE(segment.ok()) << segment.status();
  auto region = RegisteredRegion::RegisterShm(**client, **session, **segment);
  ASSERT_TRUE(region.ok()) << region.status();
  auto placed = MakeRandomRegionRequest({.m = kDim, .n = kDim, .k = kDim}, rng,
                                        (*segment)->bytes(), (*region)->id(),
                                        (*session)->session_id(), {.c = false});
  ASSERT_TRUE(placed.ok()) << placed.status();
  std::vector<std::future<absl::StatusOr<v1::MatmulResponse>>> in_flight;
  for (int i = 0; i < kProducts; ++i) {
    v1::MatmulRequest request = placed->request;
    request.set_request_id(i);
    in_flight.push_back((*client)->MatmulFuture(request, absl::Seconds(120)));
  }
  // Time for the requests to arrive.
  absl::SleepFor(absl::Milliseconds(200));
  const absl::Time signalled = absl::Now();
  server.Signal(SIGTERM);
  const int status = server.Wait();
  const absl::Duration exit_time = absl::Now() - signalled;
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The grace, a product already running (the daemon waits at most 3 s
  // more for it) and the exit itself, with room for a loaded machine.
  EXPECT_LT(exit_time, absl::Seconds(8)) << exit_time;

  // Given up: the daemon's UNAVAILABLE; on a loaded machine an answer of
  // those may not leave before gRPC's own cancel (CANCELLED), but a daemon
  // that did not give up would have none of the first kind. A request that
  // arrived only after the signal (a loaded machine again) finds its
  // session closed by the drain: UNAVAILABLE too, never NOT_FOUND.
  int answered = 0, given_up = 0, cancelled = 0, late = 0;
  for (auto& future : in_flight) {
    absl::StatusOr<v1::MatmulResponse> response = future.get();
    if (response.ok()) {
      ++answered;
      // (Results are checked elsewhere; an FP64 reference of this size
      // takes longer than the whole drain.)
      EXPECT_EQ(response->c().inline_data().size(), kDim * kDim * 2);
      continue;
    }
    if (absl::IsCancelled(response.status())) {
      ++cancelled;
      continue;
    }
    EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable)
        << response.status();
    if (absl::StrContains(response.status().message(), "shutting down")) {
      ++late;
      continue;
    }
    ++given_up;
    EXPECT_THAT(response.status().message(),
                ::testing::HasSubstr("shutdown grace (1s) ran out"));
  }
  EXPECT_GT(given_up, 0) << answered << " answered, " << cancelled
                         << " cancelled, " << late << " late";
  EXPECT_EQ(answered + given_up + cancelled + late, kProducts);
}

TEST(ServerProcessTest, BadFlagsAndBusyAddressesFailClearly) {
  EXPECT_EQ(
      RunCommand({MATMUL_SERVER_PATH, "--backend=tpu", "--metrics_listen="}),
      1);
  EXPECT_NE(RunCommand({MATMUL_SERVER_PATH, "--no_such_flag"}), 0);
  EXPECT_EQ(RunCommand({MATMUL_SERVER_PATH, "--backend=cpu",
                        "--max_shape_choices=0", "--metrics_listen="}),
            2);
  // A directory that does not exist (and that the daemon must not make:
  // only the default socket's directory is its to make).
  const std::string missing = PrivateSocketDirectory() + "/no-such-dir";
  EXPECT_EQ(
      RunCommand({MATMUL_SERVER_PATH, "--backend=cpu",
                  "--listen=unix:" + missing + "/x.sock", "--metrics_listen="}),
      1);
  struct stat info {};
  EXPECT_NE(stat(missing.c_str(), &info), 0);
}

}  // namespace
}  // namespace matmul
