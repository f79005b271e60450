// Who may reach the daemon and what each caller may do: the unix socket's
// mode, group and directory; regions, sessions and rings only for local
// callers and only in their own sessions; TLS for TCP; each client's share
// of the queue.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/regions/registered_region.h"
#include "client/regions/shared_memory_segment.h"
#include "client/request_builder.h"
#include "client/ring/request_ring.h"
#include "client/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "server/admission/client_quota.h"
#include "server/matmul_server.h"
#include "server/transport/unix_socket_listener.h"
#include "tests/test_daemon.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

// Runs `command` through the shell and returns what it printed.
std::string RunShell(const std::string& command) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return output;
  char buffer[512];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  pclose(pipe);
  return output;
}

// The probe beside the test in the build tree, or where
// MATMUL_TRANSPORT_PROBE says (a bundle on another machine).
std::string Probe(const std::string& arguments) {
  const char* path = std::getenv("MATMUL_TRANSPORT_PROBE");
  return RunShell(
      absl::StrCat(path != nullptr ? path : MATMUL_TRANSPORT_PROBE_PATH, " ",
                   arguments, " 2>&1"));
}

std::unique_ptr<MatmulServer> StartServer(const ServerOptions& options) {
  absl::StatusOr<std::unique_ptr<MatmulServer>> server =
      MatmulServer::Create(options, CpuBackend::Create(1));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

ServerOptions LocalOptions(const std::string& socket) {
  ServerOptions options = TestDaemon::DefaultOptions();
  options.listen = {"unix:" + socket};
  options.metrics_listen = "";
  return options;
}

std::unique_ptr<Client> Connect(const std::string& target,
                                ClientOptions options = {}) {
  options.wait_for_ready = false;
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Create(target, options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

v1::MatmulRequest SmallProduct() {
  std::mt19937_64 rng(std::random_device{}());
  absl::StatusOr<v1::MatmulRequest> request =
      MakeRandomRequest({.m = 24, .n = 16, .k = 8}, rng);
  EXPECT_TRUE(request.ok()) << request.status();
  return *request;
}

std::string MakeDirectory(mode_t mode) {
  std::string pattern = ::testing::TempDir() + "/matmul-dir-XXXXXX";
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  chmod(pattern.c_str(), mode);
  return pattern;
}

TEST(UnixSocketTest, SocketFileGetsTheModeAndGroupAsked) {
  const std::string socket = FreshSocketPath();
  ServerOptions options = LocalOptions(socket);
  options.unix_socket.mode = 0640;
  // Root may give the socket any group; others only one of their own.
  const gid_t group = geteuid() == 0 ? 4242 : getegid();
  options.unix_socket.group = group;
  std::unique_ptr<MatmulServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  struct stat info {};
  ASSERT_EQ(stat(socket.c_str(), &info), 0);
  EXPECT_TRUE(S_ISSOCK(info.st_mode));
  EXPECT_EQ(info.st_mode & 0777, 0640u);
  EXPECT_EQ(info.st_gid, group);
  server->Shutdown(absl::Seconds(1));
  // A stopped daemon leaves no socket behind for clients to hang on.
  EXPECT_NE(stat(socket.c_str(), &info), 0);
}

TEST(UnixSocketTest, RefusesADirectoryOthersCanWrite) {
  const std::string directory = MakeDirectory(0777);
  UnixSocketOptions options;
  absl::StatusOr<std::unique_ptr<UnixSocketListener>> refused =
      UnixSocketListener::Create(directory + "/matmul.sock", options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("writable by other users"));
  options.allow_shared_directory = true;
  EXPECT_TRUE(
      UnixSocketListener::Create(directory + "/matmul.sock", options).ok());
}

TEST(UnixSocketTest, ReplacesAStaleSocketButNoOtherFile) {
  const std::string directory = MakeDirectory(0700);
  const std::string path = directory + "/matmul.sock";
  std::ofstream(path) << "not a socket";
  absl::StatusOr<std::unique_ptr<UnixSocketListener>> refused =
      UnixSocketListener::Create(path, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("is not a socket"));
  unlink(path.c_str());

  // A socket bound and abandoned, as a daemon that was killed leaves it.
  int stale = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", path.c_str());
  ASSERT_EQ(bind(stale, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
            0);
  close(stale);
  absl::StatusOr<std::unique_ptr<UnixSocketListener>> replaced =
      UnixSocketListener::Create(path, {});
  EXPECT_TRUE(replaced.ok()) << replaced.status();

  // One that a live server listens on is not taken over.
  absl::StatusOr<std::unique_ptr<UnixSocketListener>> second =
      UnixSocketListener::Create(path, {});
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("another server"));
}

TEST(UnixSocketTest, TheSocketsGroupDecidesWhoMayConnect) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "needs root to run a client as another user";
  }
  // The other user must be able to walk to the socket: 0755, owned by
  // root, so not writable by anyone else.
  const std::string directory = MakeDirectory(0755);
  const std::string socket = directory + "/matmul.sock";
  ServerOptions options = LocalOptions(socket);
  options.unix_socket.mode = 0660;
  options.unix_socket.group = 4242;
  std::unique_ptr<MatmulServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  const std::string target = "unix:" + socket;
  EXPECT_EQ(Probe(absl::StrCat("--as_uid=65534 --as_gid=65534 --groups=4242 ",
                               target, " info")),
            "OK\n");
  EXPECT_EQ(Probe(absl::StrCat(
                "--as_uid=65534 --as_gid=65534 --groups= ", target, " info")),
            "UNAVAILABLE\n");
}

// Root's segment, which the other user could not open itself, is not
// opened for it by the daemon (which runs as root here).
TEST(UnixSocketTest, AnotherUsersShmSegmentIsRefused) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "needs root to run a client as another user";
  }
  const std::string directory = MakeDirectory(0755);
  const std::string socket = directory + "/matmul.sock";
  ServerOptions options = LocalOptions(socket);
  options.unix_socket.mode = 0666;
  std::unique_ptr<MatmulServer> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<SharedMemorySegment>> secret =
      SharedMemorySegment::Create(4096);
  ASSERT_TRUE(secret.ok()) << secret.status();
  const std::string target = "unix:" + socket;
  EXPECT_EQ(Probe(absl::StrCat("--as_uid=65534 --as_gid=65534 --groups= ",
                               target, " register_shm ", (*secret)->name())),
            "PERMISSION_DENIED\n");
  // Its owner may.
  EXPECT_EQ(Probe(absl::StrCat(target, " register_shm ", (*secret)->name())),
            "OK\n");
}

// A daemon with a unix socket and a loopback TCP port.
class LocalAndTcpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    socket_ = FreshSocketPath();
    ServerOptions options = LocalOptions(socket_);
    options.listen.push_back("127.0.0.1:0");
    server_ = StartServer(options);
    ASSERT_NE(server_, nullptr);
    local_ = Connect("unix:" + socket_);
    tcp_ = Connect(absl::StrCat("127.0.0.1:", server_->bound_ports()[1]));
  }

  std::string socket_;
  std::unique_ptr<MatmulServer> server_;
  std::unique_ptr<Client> local_;
  std::unique_ptr<Client> tcp_;
};

TEST_F(LocalAndTcpTest, RegionsSessionsAndRingsAreRefusedOverTcp) {
  absl::StatusOr<std::unique_ptr<Session>> over_tcp =
      Session::Open(*tcp_, "remote", absl::Seconds(10));
  ASSERT_FALSE(over_tcp.ok());
  EXPECT_EQ(over_tcp.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(over_tcp.status().message(), HasSubstr("unix socket"));

  // A real session, opened locally; its id does not help a TCP caller.
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Open(*local_, "local", absl::Seconds(10));
  ASSERT_TRUE(session.ok()) << session.status();
  const std::string id = (*session)->session_id();
  absl::StatusOr<std::unique_ptr<SharedMemorySegment>> segment =
      SharedMemorySegment::Create(4096);
  ASSERT_TRUE(segment.ok()) << segment.status();
  EXPECT_EQ(RegisteredRegion::RegisterShm(*tcp_, **session, **segment)
                .status()
                .code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(tcp_->ListRegions(id, absl::Seconds(5)).status().code(),
            absl::StatusCode::kPermissionDenied);
  v1::UnregisterRegionRequest unregister;
  unregister.set_session_id(id);
  unregister.set_region_id("0123");
  EXPECT_EQ(
      tcp_->UnregisterRegion(unregister, absl::Seconds(5)).status().code(),
      absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(RequestRing::Attach(*tcp_, **session, {}, absl::Seconds(10))
                .status()
                .code(),
            absl::StatusCode::kPermissionDenied);

  absl::StatusOr<std::unique_ptr<RegisteredRegion>> region =
      RegisteredRegion::RegisterShm(*local_, **session, **segment);
  ASSERT_TRUE(region.ok()) << region.status();
  v1::MatmulRequest on_region = SmallProduct();
  on_region.set_session_id(id);
  on_region.mutable_a()->mutable_region()->set_region_id((*region)->id());
  absl::StatusOr<v1::MatmulResponse> refused =
      tcp_->Matmul(on_region, absl::Seconds(10));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);

  // Inline products are what TCP is for.
  const v1::MatmulRequest inline_product = SmallProduct();
  absl::StatusOr<v1::MatmulResponse> answered =
      tcp_->Matmul(inline_product, absl::Seconds(10));
  ASSERT_TRUE(answered.ok()) << answered.status();
  absl::StatusOr<double> error = CheckResponse(inline_product, *answered);
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_LT(*error, 1e-2);
}

TEST_F(LocalAndTcpTest, ASessionServesOnlyTheProcessThatOpenedIt) {
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Open(*local_, "owner", absl::Seconds(10));
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_TRUE(
      local_->ListRegions((*session)->session_id(), absl::Seconds(5)).ok());
  // Another process on the same socket, same user, knowing the id.
  EXPECT_EQ(Probe(absl::StrCat("unix:", socket_, " use_session ",
                               (*session)->session_id())),
            "PERMISSION_DENIED\nPERMISSION_DENIED\n");
}

TEST_F(LocalAndTcpTest, AttachRingNeedsASessionThatExists) {
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Open(*local_, "owner", absl::Seconds(10));
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ(
      Probe(absl::StrCat("unix:", socket_,
                         " use_session 00000000000000000000000000000000")),
      "NOT_FOUND\nNOT_FOUND\n");
}

TEST(RingQuotaTest, RingsCountAgainstTheirSessionsQuota) {
  ServerOptions options = TestDaemon::DefaultOptions();
  options.regions.max_rings_per_session = 1;
  TestDaemon daemon(options);
  absl::StatusOr<std::unique_ptr<Session>> first =
      Session::Open(daemon.client(), "first", absl::Seconds(10));
  absl::StatusOr<std::unique_ptr<Session>> second =
      Session::Open(daemon.client(), "second", absl::Seconds(10));
  ASSERT_TRUE(first.ok() && second.ok());
  absl::StatusOr<std::unique_ptr<RequestRing>> ring =
      RequestRing::Attach(daemon.client(), **first);
  ASSERT_TRUE(ring.ok()) << ring.status();
  absl::StatusOr<std::unique_ptr<RequestRing>> over =
      RequestRing::Attach(daemon.client(), **first);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(), HasSubstr("--max_rings_per_session"));
  // The other session's quota is its own.
  EXPECT_TRUE(RequestRing::Attach(daemon.client(), **second).ok());
  // A detached ring gives its place back.
  ring->reset();
  EXPECT_TRUE(WaitFor(
      [&] { return RequestRing::Attach(daemon.client(), **first).ok(); }));
}

TEST(ClientQuotaTest, EachClientHasItsOwnShare) {
  ClientQuota quota(2);
  EXPECT_TRUE(quota.Acquire("a").ok());
  EXPECT_TRUE(quota.Acquire("a").ok());
  EXPECT_EQ(quota.Acquire("a").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(quota.Acquire("b").ok());
  quota.Release("a");
  EXPECT_TRUE(quota.Acquire("a").ok());
  EXPECT_EQ(quota.in_flight("a"), 2);
  ClientQuota unlimited(0);
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(unlimited.Acquire("a").ok());
}

// One process floods the daemon with four times the queue's room in
// concurrent calls; another sends products one after another. The flooder
// is held to its share, so the other always finds room in the queue.
TEST(ClientQuotaTest, AFloodingClientCannotCrowdOutAnother) {
  ServerOptions options = TestDaemon::DefaultOptions();
  options.executor.worker_threads = 1;
  options.executor.batching.max_batch_size = 1;
  options.executor.batching.max_queue_size = 16;
  options.service.admission.max_in_flight_per_client = 8;
  TestDaemon daemon(options);
  std::string flood_report;
  std::thread flooder([&] {
    flood_report = Probe(absl::StrCat(daemon.target(), " flood 4 64"));
  });
  // Let the flood fill its share first.
  absl::SleepFor(absl::Milliseconds(500));
  std::vector<double> latencies;
  int refused = 0;
  for (int i = 0; i < 100; ++i) {
    const v1::MatmulRequest request = SmallProduct();
    const absl::Time start = absl::Now();
    absl::StatusOr<v1::MatmulResponse> response =
        daemon.client().Matmul(request, absl::Seconds(30));
    latencies.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    if (!response.ok()) {
      ++refused;
      ADD_FAILURE() << response.status();
      continue;
    }
    absl::StatusOr<double> error = CheckResponse(request, *response);
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_LT(*error, 1e-2);
  }
  flooder.join();
  EXPECT_EQ(refused, 0);
  // The flood did hit its share: it was refused, and it was served.
  EXPECT_THAT(flood_report, HasSubstr("RESOURCE_EXHAUSTED"));
  EXPECT_THAT(flood_report, HasSubstr("OK"));
  std::sort(latencies.begin(), latencies.end());
  const double p99 = latencies[latencies.size() * 99 / 100];
  std::printf("victim p99 %.2f ms beside the flood (%s)\n", p99 * 1e3,
              flood_report.c_str());
  // Behind at most the flooder's 8 small products on one worker.
  EXPECT_LT(p99, 2.0);
}

// Certificates made for the test by openssl: a CA, a server certificate
// for 127.0.0.1, a client certificate the CA signed, and one it did not.
class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (RunShell("command -v openssl").empty()) GTEST_SKIP() << "needs openssl";
    dir_ = MakeDirectory(0700);
    const std::string script = absl::StrCat(
        "(cd ", dir_, " && set -e && ",
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=test-ca "
        "-keyout ca.key -out ca.pem && ",
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=other-ca "
        "-keyout other.key -out other.pem && ",
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext && ",
        "openssl req -newkey rsa:2048 -nodes -subj /CN=localhost "
        "-keyout server.key -out server.csr && ",
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key "
        "-CAcreateserial -days 1 -extfile san.ext -out server.pem && ",
        "openssl req -newkey rsa:2048 -nodes -subj /CN=client "
        "-keyout client.key -out client.csr && ",
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key "
        "-CAcreateserial -days 1 -out client.pem && ",
        "openssl req -newkey rsa:2048 -nodes -subj /CN=intruder "
        "-keyout intruder.key -out intruder.csr && ",
        "openssl x509 -req -in intruder.csr -CA other.pem -CAkey other.key "
        "-CAcreateserial -days 1 -out intruder.pem && echo made) 2>&1");
    ASSERT_THAT(RunShell(script), HasSubstr("made"));
    ServerOptions options = LocalOptions(FreshSocketPath());
    options.listen.push_back("127.0.0.1:0");
    options.tls = {.cert_file = dir_ + "/server.pem",
                   .key_file = dir_ + "/server.key",
                   .client_ca_file = dir_ + "/ca.pem"};
    server_ = StartServer(options);
    ASSERT_NE(server_, nullptr);
    target_ = absl::StrCat("127.0.0.1:", server_->bound_ports()[1]);
  }

  absl::Status Call(const ClientTlsOptions& tls) {
    ClientOptions options;
    options.tls = tls;
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Create(target_, options);
    if (!client.ok()) return client.status();
    return (*client)->GetServerInfo(absl::Seconds(5)).status();
  }

  std::string dir_;
  std::unique_ptr<MatmulServer> server_;
  std::string target_;
};

TEST_F(TlsTest, MutualTlsAcceptsOnlyClientsTheCaSigned) {
  const std::string ca = dir_ + "/ca.pem";
  EXPECT_TRUE(Call({.ca_file = ca,
                    .cert_file = dir_ + "/client.pem",
                    .key_file = dir_ + "/client.key"})
                  .ok());
  EXPECT_EQ(Call({.ca_file = ca}).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Call({.ca_file = ca,
                  .cert_file = dir_ + "/intruder.pem",
                  .key_file = dir_ + "/intruder.key"})
                .code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(Call({}).code(), absl::StatusCode::kUnavailable);
}

TEST(TcpTest, PlaintextBeyondLoopbackNeedsTheOperatorsWord) {
  ServerOptions options = LocalOptions(FreshSocketPath());
  options.listen.push_back("0.0.0.0:0");
  absl::StatusOr<std::unique_ptr<MatmulServer>> refused =
      MatmulServer::Create(options, CpuBackend::Create(1));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("--allow_insecure_tcp"));
  options.listen.front() = "unix:" + FreshSocketPath();
  options.allow_insecure_tcp = true;
  EXPECT_TRUE(MatmulServer::Create(options, CpuBackend::Create(1)).ok());
}

}  // namespace
}  // namespace matmul
