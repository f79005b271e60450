// Segment names and the reaping of those dead clients left, on real shm
// objects under a prefix of each test's own.
#include "client/regions/segment_names.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/regions/shared_memory_segment.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace matmul {

// Failures name the owner, not its bytes.
void PrintTo(const SegmentOwner& owner, std::ostream* out) {
  *out << "{pid " << owner.pid << ", pid namespace " << owner.pid_namespace
       << "}";
}

namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Optional;

constexpr char kHex[] = "00ff00ff00ff00ff";

// The names a reaping removed, or its error as the one name (which no
// expectation of names matches).
std::vector<std::string> Removed(
    const absl::StatusOr<std::vector<std::string>>& result) {
  if (!result.ok()) return {result.status().ToString()};
  return *result;
}

TEST(ParseSegmentOwnerTest, ReadsItsOwnFormat) {
  const SegmentOwner owner{1234, 4026531836};
  const std::string name = SegmentName("matmul", owner, kHex);
  EXPECT_EQ(name, "matmul-1234-4026531836-00ff00ff00ff00ff");
  EXPECT_THAT(ParseSegmentOwner(name, "matmul"), Optional(owner));
  // A prefix may hold '-' itself.
  EXPECT_THAT(ParseSegmentOwner("a-b-7-9-0123456789abcdef", "a-b"),
              Optional(SegmentOwner{7, 9}));
  // Where the namespace could not be read.
  EXPECT_THAT(ParseSegmentOwner("matmul-7-0-0123456789abcdef", "matmul"),
              Optional(SegmentOwner{7, 0}));
}

TEST(ParseSegmentOwnerTest, NewNamesCarryThisProcess) {
  const std::string first = NewSegmentName("matmul.test");
  const std::string second = NewSegmentName("matmul.test");
  EXPECT_NE(first, second);
  const SegmentOwner self{getpid(), PidNamespace().value_or(0)};
  EXPECT_THAT(ParseSegmentOwner(first, "matmul.test"), Optional(self));
  EXPECT_THAT(ParseSegmentOwner(second, "matmul.test"), Optional(self));
}

TEST(ParseSegmentOwnerTest, RefusesOtherNames) {
  for (const char* name : {
           // The format before this one: its namespace is unknown.
           "matmul-1234-00ff00ff00ff00ff",
           // The Python client's.
           "matmul-py1234-5-00ff00ff00ff00ff",
           // Other prefixes, including longer ones that start with this one.
           "other-1-2-00ff00ff00ff00ff",
           "matmulx-1-2-00ff00ff00ff00ff",
           "matmul-1-2-3-00ff00ff00ff00ff",
           "matmul-ringtest-1-2",
           // Parts missing, extra, empty or misspelt.
           "",
           "matmul",
           "matmul-",
           "matmul-1-2",
           "matmul-1-2-",
           "matmul--2-00ff00ff00ff00ff",
           "matmul-1--00ff00ff00ff00ff",
           "matmul-1-2-00ff00ff00ff00ff-3",
           "matmul-1-2-00ff00ff00ff00f",
           "matmul-1-2-00ff00ff00ff00ff0",
           "matmul-1-2-00FF00FF00FF00FF",
           "matmul-1-2-00ff00ff00ff00fg",
           "matmul-x1-2-00ff00ff00ff00ff",
           "matmul-1-2x-00ff00ff00ff00ff",
           // pid 0 (kill would signal our process group), leading zeros,
           // numbers out of range.
           "matmul-0-2-00ff00ff00ff00ff",
           "matmul-01-2-00ff00ff00ff00ff",
           "matmul-1-02-00ff00ff00ff00ff",
           "matmul-99999999999-2-00ff00ff00ff00ff",
           "matmul-1-18446744073709551616-00ff00ff00ff00ff",
       }) {
    EXPECT_EQ(ParseSegmentOwner(name, "matmul"), std::nullopt) << name;
  }
}

// A pid of this namespace that nobody has: a child that exited and was
// waited for.
pid_t DeadPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  if (pid > 0) waitpid(pid, nullptr, 0);
  return pid;
}

// A child that lives until the object goes.
class LiveChild {
 public:
  LiveChild() : pid_(fork()) {
    if (pid_ == 0) {
      for (;;) pause();
    }
  }
  ~LiveChild() { Kill(); }
  LiveChild(const LiveChild&) = delete;
  LiveChild& operator=(const LiveChild&) = delete;

  pid_t pid() const { return pid_; }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_;
};

class ReapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::optional<uint64_t> pid_namespace = PidNamespace();
    if (!pid_namespace.has_value()) GTEST_SKIP() << "no /proc/self/ns/pid";
    namespace_ = *pid_namespace;
    prefix_ = absl::StrCat(
        "matmul.reaptest.", getpid(), ".",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  void TearDown() override {
    if (prefix_.empty()) return;
    for (const std::string& name : Names()) {
      shm_unlink(absl::StrCat("/", name).c_str());
    }
    EXPECT_THAT(Names(), IsEmpty());
  }

  // Creates a real shm object (as a client does, empty) named `name`.
  void Make(const std::string& name) {
    const int fd = shm_open(absl::StrCat("/", name).c_str(),
                            O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << name << ": " << std::strerror(errno);
    close(fd);
  }

  // The prefix's names now in /dev/shm.
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    const std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir("/dev/shm"),
                                                  &closedir);
    if (dir == nullptr) return names;
    while (const dirent* entry = readdir(dir.get())) {
      if (absl::StartsWith(entry->d_name, prefix_ + "-")) {
        names.emplace_back(entry->d_name);
      }
    }
    return names;
  }

  bool Exists(const std::string& name) const {
    return access(absl::StrCat("/dev/shm/", name).c_str(), F_OK) == 0;
  }

  std::string Name(pid_t pid, uint64_t pid_namespace) const {
    return SegmentName(prefix_, SegmentOwner{pid, pid_namespace}, kHex);
  }

  std::string prefix_;
  uint64_t namespace_ = 0;
};

TEST_F(ReapTest, RemovesTheNameOfADeadClientOfThisNamespace) {
  const pid_t dead = DeadPid();
  ASSERT_GT(dead, 0) << std::strerror(errno);
  const std::string orphan = Name(dead, namespace_);
  ASSERT_NO_FATAL_FAILURE(Make(orphan));
  EXPECT_THAT(Removed(ReapOrphanedSegments(prefix_)), ElementsAre(orphan));
  EXPECT_FALSE(Exists(orphan));
  EXPECT_THAT(Removed(ReapOrphanedSegments(prefix_)), IsEmpty());
}

TEST_F(ReapTest, LeavesLiveClientsAloneUntilTheyDie) {
  LiveChild child;
  ASSERT_GT(child.pid(), 0) << std::strerror(errno);
  const std::string theirs = Name(child.pid(), namespace_);
  const std::string ours = Name(getpid(), namespace_);
  ASSERT_NO_FATAL_FAILURE(Make(theirs));
  ASSERT_NO_FATAL_FAILURE(Make(ours));
  EXPECT_THAT(Removed(ReapOrphanedSegments(prefix_)), IsEmpty());
  EXPECT_TRUE(Exists(theirs));
  EXPECT_TRUE(Exists(ours));
  child.Kill();
  EXPECT_THAT(Removed(ReapOrphanedSegments(prefix_)), ElementsAre(theirs));
  EXPECT_FALSE(Exists(theirs));
  EXPECT_TRUE(Exists(ours));
}

TEST_F(ReapTest, LeavesOtherNamespacesAndOtherFormatsAlone) {
  const pid_t dead = DeadPid();
  ASSERT_GT(dead, 0) << std::strerror(errno);
  const std::string ours = Name(dead, namespace_);
  const std::vector<std::string> others = {
      // Another pid namespace, where the pid means nothing here.
      Name(dead, namespace_ + 1),
      // A maker whose namespace could not be read.
      Name(dead, 0),
      // The format before this one.
      absl::StrCat(prefix_, "-", dead, "-", kHex),
      // The Python client's.
      absl::StrCat(prefix_, "-py", dead, "-", namespace_, "-", kHex),
      // A longer prefix.
      absl::StrCat(prefix_, "-x-", dead, "-", namespace_, "-", kHex),
  };
  ASSERT_NO_FATAL_FAILURE(Make(ours));
  for (const std::string& name : others) ASSERT_NO_FATAL_FAILURE(Make(name));
  EXPECT_THAT(Removed(ReapOrphanedSegments(prefix_)), ElementsAre(ours));
  for (const std::string& name : others) EXPECT_TRUE(Exists(name)) << name;
}

TEST_F(ReapTest, LeavesOtherUsersObjectsAlone) {
  // Only root can give an object to another user.
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  const pid_t dead = DeadPid();
  ASSERT_GT(dead, 0) << std::strerror(errno);
  const std::string theirs = Name(dead, namespace_);
  ASSERT_NO_FATAL_FAILURE(Make(theirs));
  ASSERT_EQ(chown(absl::StrCat("/dev/shm/", theirs).c_str(), 65534, 65534), 0)
      << std::strerror(errno);
  EXPECT_THAT(Removed(ReapOrphanedSegments(prefix_)), IsEmpty());
  EXPECT_TRUE(Exists(theirs));
}

TEST_F(ReapTest, OncePerPrefixPerProcess) {
  const pid_t dead = DeadPid();
  ASSERT_GT(dead, 0) << std::strerror(errno);
  const std::string first = Name(dead, namespace_);
  ASSERT_NO_FATAL_FAILURE(Make(first));
  EXPECT_THAT(Removed(ReapOrphanedSegmentsOnce(prefix_)), ElementsAre(first));
  // A name orphaned later stays until another process starts.
  const std::string later =
      SegmentName(prefix_, SegmentOwner{dead, namespace_}, "0123456789abcdef");
  ASSERT_NO_FATAL_FAILURE(Make(later));
  EXPECT_THAT(Removed(ReapOrphanedSegmentsOnce(prefix_)), IsEmpty());
  EXPECT_TRUE(Exists(later));
  EXPECT_THAT(Removed(ReapOrphanedSegments(prefix_)), ElementsAre(later));
}

TEST_F(ReapTest, TheFirstSegmentOfAPrefixReaps) {
  const pid_t dead = DeadPid();
  ASSERT_GT(dead, 0) << std::strerror(errno);
  const std::string orphan = Name(dead, namespace_);
  ASSERT_NO_FATAL_FAILURE(Make(orphan));
  auto segment = SharedMemorySegment::Create(4096, prefix_);
  ASSERT_TRUE(segment.ok()) << segment.status();
  EXPECT_FALSE(Exists(orphan));
  EXPECT_THAT(ParseSegmentOwner((*segment)->name(), prefix_),
              Optional(SegmentOwner{getpid(), namespace_}));
  EXPECT_THAT(Names(), ElementsAre((*segment)->name()));
}

}  // namespace
}  // namespace matmul
