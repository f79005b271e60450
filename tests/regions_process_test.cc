// Regions across processes: a client killed with SIGKILL has its session
// and regions released by the daemon (here in-process, so its registry and
// mappings can be inspected), and matmul-cli's shm mode end to end.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/test_daemon.h"

extern char** environ;

namespace matmul {
namespace {

// A child whose stdout is a pipe to us; killed (if still running) and
// reaped on scope exit.
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    std::vector<char*> args;
    for (const std::string& arg : argv) {
      args.push_back(const_cast<char*>(arg.c_str()));
    }
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ) !=
        0) {
      pid_ = -1;
    }
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    out_ = fds[0];
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      Wait();
    }
    if (out_ >= 0) close(out_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  bool started() const { return pid_ > 0; }
  void Kill() { kill(pid_, SIGKILL); }
  int Wait() {
    int status = -1;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

  // Reads stdout up to the first newline (or EOF), waiting at most
  // `timeout` in all.
  std::string ReadLine(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    std::string line;
    char ch;
    while (absl::Now() < deadline) {
      pollfd fd{.fd = out_, .events = POLLIN, .revents = 0};
      const int wait_ms = static_cast<int>(
          absl::ToInt64Milliseconds(deadline - absl::Now()) + 1);
      if (poll(&fd, 1, wait_ms) <= 0) continue;
      if (read(out_, &ch, 1) != 1 || ch == '\n') return line;
      line.push_back(ch);
    }
    return line;
  }

  // Everything left on stdout until EOF.
  std::string ReadAll() {
    std::string text;
    char buffer[4096];
    for (ssize_t n; (n = read(out_, buffer, sizeof(buffer))) > 0;) {
      text.append(buffer, static_cast<size_t>(n));
    }
    return text;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
};

TEST(RegionsProcessTest, KilledClientHasItsRegionsReleased) {
  TestDaemon daemon;
  const RegionRegistry& registry = daemon.server().regions();
  Child holder({MATMUL_SESSION_HOLDER_PATH, daemon.target()});
  ASSERT_TRUE(holder.started());
  // Generous: the child starts, connects and registers on a loaded machine.
  const std::string line = holder.ReadLine(absl::Seconds(60));
  std::vector<std::string> fields = absl::StrSplit(line, ' ');
  ASSERT_EQ(fields.size(), 3u) << "session_holder printed '" << line << "'";
  const std::string& shm_name = fields[1];
  EXPECT_EQ(registry.session_count(), 1);
  EXPECT_EQ(registry.region_count(), 1);
  EXPECT_EQ(MappingsOf(shm_name), 1);  // the daemon's mapping

  holder.Kill();
  const int status = holder.Wait();
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  // The kernel closes the child's socket; gRPC cancels the OpenSession
  // stream and the daemon drops the session. Polled, not slept for.
  EXPECT_TRUE(WaitFor(
      [&] {
        return registry.session_count() == 0 && registry.region_count() == 0;
      },
      absl::Seconds(20)))
      << registry.session_count() << " sessions, " << registry.region_count()
      << " regions left";
  EXPECT_TRUE(WaitFor([&] { return MappingsOf(shm_name) == 0; }));
  // The holder unlinked the object after registering: nothing is left.
  EXPECT_NE(access(("/dev/shm/" + shm_name).c_str(), F_OK), 0);
}

TEST(RegionsProcessTest, CliShmModeChecksAgainstFp64) {
  TestDaemon daemon;
  for (const char* extra : {"--transpose_b", "--batch=3", "--beta=0.5"}) {
    SCOPED_TRACE(extra);
    Child cli({MATMUL_CLI_PATH, "run", "--mode=shm", "--check",
               "--shape=67x45x91", "--iterations=3", "--out_dtype=fp32", extra,
               "--target=" + daemon.target()});
    ASSERT_TRUE(cli.started());
    const std::string output = cli.ReadAll();
    const int status = cli.Wait();
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << output;
    EXPECT_NE(output.find("mode:       shm"), std::string::npos) << output;
    EXPECT_NE(output.find("PASS"), std::string::npos) << output;
  }
  // The CLI's session ended with it.
  EXPECT_TRUE(WaitFor([&] {
    return daemon.server().regions().session_count() == 0 &&
           daemon.server().regions().region_count() == 0;
  }));
}

}  // namespace
}  // namespace matmul
