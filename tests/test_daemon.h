// An in-process daemon on a fresh unix socket, for tests that need a real
// server and a real client.
#ifndef MATMUL_TESTS_TEST_DAEMON_H_
#define MATMUL_TESTS_TEST_DAEMON_H_

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "server/matmul_server.h"

namespace matmul {

// A directory of this test process's own (0700): the daemon refuses to
// put its socket where other users could replace it, as in /tmp itself.
inline const std::string& PrivateSocketDirectory() {
  static const std::string* directory = [] {
    std::string pattern = ::testing::TempDir() + "/matmul-test-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp " << pattern;
    }
    return new std::string(pattern);
  }();
  return *directory;
}

// A fresh socket path per call: tests in one binary never share a daemon.
inline std::string FreshSocketPath() {
  static std::atomic<int> counter{0};
  return absl::StrCat(PrivateSocketDirectory(), "/matmul-",
                      counter.fetch_add(1), ".sock");
}

// The sum of the samples of a Prometheus text scrape that `series` selects:
// those of its name that carry every label it gives (others may differ), e.g.
// MetricValue(scrape, "matmul_requests_total{code=\"ok\"}") sums the OK
// requests of every shape; -1 if none matches.
inline double MetricValue(const std::string& scrape,
                          const std::string& series) {
  const size_t brace = series.find('{');
  const std::string name = series.substr(0, brace);
  std::vector<std::string> wanted;
  if (brace != std::string::npos) {
    wanted = absl::StrSplit(series.substr(brace + 1, series.size() - brace - 2),
                            ',', absl::SkipEmpty());
  }
  double sum = 0;
  bool found = false;
  for (absl::string_view line : absl::StrSplit(scrape, '\n')) {
    if (!absl::StartsWith(line, name)) continue;
    const size_t space = line.rfind(' ');
    absl::string_view labels = line.substr(name.size(), space - name.size());
    if (space == absl::string_view::npos ||
        (!labels.empty() && labels.front() != '{')) {
      continue;
    }
    bool all = true;
    for (const std::string& label : wanted) {
      all = all && (absl::StrContains(labels, absl::StrCat("{", label, ",")) ||
                    absl::StrContains(labels, absl::StrCat("{", label, "}")) ||
                    absl::StrContains(labels, absl::StrCat(",", label, ",")) ||
                    absl::StrContains(labels, absl::StrCat(",", label, "}")));
    }
    if (!all) continue;
    sum += std::stod(std::string(line.substr(space + 1)));
    found = true;
  }
  return found ? sum : -1;
}

// Lines of /proc/self/maps that map /dev/shm/<name>: the daemon runs in
// this process, so its mappings show up beside the client's own.
inline int MappingsOf(const std::string& shm_name) {
  std::ifstream maps("/proc/self/maps");
  const std::string path = "/dev/shm/" + shm_name;
  int count = 0;
  for (std::string line; std::getline(maps, line);) {
    const size_t at = line.find(path);
    // The path ends the line, or " (deleted)" follows once unlinked.
    if (at != std::string::npos &&
        (at + path.size() == line.size() || line[at + path.size()] == ' ')) {
      ++count;
    }
  }
  return count;
}

// Polls `condition` every 5 ms for up to `timeout`; returns its last value.
template <typename Condition>
bool WaitFor(Condition condition, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

class TestDaemon {
 public:
  // Starts a CPU-backend daemon (metrics not served over HTTP; Scrape()
  // reads them) and a client connected to it.
  // `cpu_lanes` CPU backends stand in for several devices;
  // `make_backend`, when set, makes each lane's backend instead.
  explicit TestDaemon(ServerOptions options = DefaultOptions(),
                      int cpu_lanes = 1,
                      const std::function<std::unique_ptr<GemmBackend>()>&
                          make_backend = nullptr) {
    socket_ = FreshSocketPath();
    options.listen = {"unix:" + socket_};
    options.metrics_listen = "";
    std::vector<std::unique_ptr<GemmBackend>> backends;
    for (int i = 0; i < cpu_lanes; ++i) {
      backends.push_back(make_backend ? make_backend() : CpuBackend::Create(1));
    }
    auto server = MatmulServer::Create(options, std::move(backends));
    EXPECT_TRUE(server.ok()) << server.status();
    if (server.ok()) server_ = *std::move(server);
    ClientOptions client_options;
    client_options.max_message_bytes =
        options.service.admission.limits.max_message_bytes * 2;
    client_options.wait_for_ready = true;
    auto client = Client::Create("unix:" + socket_, client_options);
    EXPECT_TRUE(client.ok()) << client.status();
    if (client.ok()) client_ = *std::move(client);
  }
  ~TestDaemon() {
    client_.reset();
    if (server_) server_->Shutdown(absl::Seconds(5));
    unlink(socket_.c_str());
  }

  static ServerOptions DefaultOptions() {
    ServerOptions options;
    options.executor.worker_threads = 2;
    return options;
  }

  Client& client() { return *client_; }
  MatmulServer& server() { return *server_; }
  std::string target() const { return "unix:" + socket_; }

 private:
  std::string socket_;
  std::unique_ptr<MatmulServer> server_;
  std::unique_ptr<Client> client_;
};

}  // namespace matmul

#endif  // MATMUL_TESTS_TEST_DAEMON_H_
