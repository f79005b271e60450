// SigbusGuard on memfd mappings: a truncated object read and written from
// threads that did not create the guard (no crash, the flag set, other
// guards untouched), a fault outside every guarded range still kills, a
// previous handler still gets the faults that are not ours, and the table
// is bounded.
#include "server/regions/sigbus_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace matmul {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

// A memfd of `pages` pages of random bytes, mapped shared.
class MappedMemfd {
 public:
  explicit MappedMemfd(size_t pages, uint64_t seed = 1)
      : bytes_(pages * kPage) {
    fd_ = memfd_create("sigbus_guard_test", MFD_CLOEXEC);
    EXPECT_GE(fd_, 0) << strerror(errno);
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(bytes_)), 0);
    void* data =
        mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    EXPECT_NE(data, MAP_FAILED) << strerror(errno);
    data_ = static_cast<unsigned char*>(data);
    std::mt19937_64 rng(seed);
    for (size_t i = 0; i < bytes_; ++i) {
      data_[i] = static_cast<unsigned char>(1 + rng() % 255);  // never zero
    }
  }
  ~MappedMemfd() {
    munmap(data_, bytes_);
    close(fd_);
  }

  void Truncate() { TruncateTo(0); }
  void TruncateTo(size_t bytes) {
    ASSERT_EQ(ftruncate(fd_, static_cast<off_t>(bytes)), 0) << strerror(errno);
  }

  unsigned char* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  const size_t bytes_;
  int fd_ = -1;
  unsigned char* data_ = nullptr;
};

// Reads every byte through a volatile pointer (so that each access
// happens) and returns their sum.
uint64_t ReadAll(const unsigned char* data, size_t bytes) {
  const volatile unsigned char* p = data;
  uint64_t sum = 0;
  for (size_t i = 0; i < bytes; ++i) sum += p[i];
  return sum;
}

TEST(SigbusGuardTest, TruncatedMappingIsUsableFromEveryThreadAndFlagged) {
  MappedMemfd mapped(/*pages=*/64);
  MappedMemfd other(/*pages=*/4, /*seed=*/2);
  absl::StatusOr<std::unique_ptr<SigbusGuard>> guard =
      SigbusGuard::Create(mapped.data(), mapped.bytes());
  ASSERT_TRUE(guard.ok()) << guard.status();
  absl::StatusOr<std::unique_ptr<SigbusGuard>> other_guard =
      SigbusGuard::Create(other.data(), other.bytes());
  ASSERT_TRUE(other_guard.ok()) << other_guard.status();
  const std::vector<unsigned char> other_before(other.data(),
                                                other.data() + other.bytes());
  EXPECT_GT(ReadAll(mapped.data(), mapped.bytes()), 0u);
  EXPECT_FALSE((*guard)->faulted());

  mapped.Truncate();
  // Threads this test starts (not the one that made the guard) read and
  // write all of it at once, each from its own starting page.
  constexpr int kThreads = 6;
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const size_t pages = mapped.bytes() / kPage;
      for (size_t i = 0; i < pages; ++i) {
        unsigned char* page = mapped.data() + ((i + t * 7) % pages) * kPage;
        ReadAll(page, kPage);
        std::memset(page, 0x5a + t, kPage / 2);
      }
      done.fetch_add(1);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(done.load(), kThreads);
  EXPECT_TRUE((*guard)->faulted());
  // The mapping stays usable: private memory now, no longer the object's.
  std::memset(mapped.data(), 0x11, mapped.bytes());
  EXPECT_EQ(ReadAll(mapped.data(), mapped.bytes()),
            uint64_t{0x11} * mapped.bytes());

  // A guard over another mapping saw nothing.
  EXPECT_FALSE((*other_guard)->faulted());
  EXPECT_EQ(
      std::vector<unsigned char>(other.data(), other.data() + other.bytes()),
      other_before);
}

TEST(SigbusGuardTest, ShrinkingToHalfFaultsOnlyPastTheNewEnd) {
  MappedMemfd mapped(/*pages=*/8);
  auto guard = SigbusGuard::Create(mapped.data(), mapped.bytes());
  ASSERT_TRUE(guard.ok()) << guard.status();
  const size_t half = mapped.bytes() / 2;
  mapped.TruncateTo(half);
  // Below the new end the object is still there.
  EXPECT_GT(ReadAll(mapped.data(), half), 0u);
  EXPECT_FALSE((*guard)->faulted());
  // Past it the access faults; from then on the whole range reads zeros,
  // and the flag, set before the zeros appear, says so.
  EXPECT_EQ(ReadAll(mapped.data() + half, half), 0u);
  EXPECT_TRUE((*guard)->faulted());
  EXPECT_EQ(ReadAll(mapped.data(), half), 0u);
}

TEST(SigbusGuardTest, ReleasedGuardsAreReused) {
  MappedMemfd mapped(/*pages=*/1);
  // Many more than the table holds, one after another.
  for (size_t i = 0; i < 3 * SigbusGuard::kCapacity; ++i) {
    auto guard = SigbusGuard::Create(mapped.data(), mapped.bytes());
    ASSERT_TRUE(guard.ok()) << guard.status();
  }
}

TEST(SigbusGuardTest, TheTableIsBounded) {
  MappedMemfd mapped(/*pages=*/1);
  std::vector<std::unique_ptr<SigbusGuard>> guards;
  guards.reserve(SigbusGuard::kCapacity);
  absl::Status status;
  // Other tests' guards are gone: the whole table is free.
  for (size_t i = 0; i <= SigbusGuard::kCapacity; ++i) {
    auto guard = SigbusGuard::Create(mapped.data(), mapped.bytes());
    if (!guard.ok()) {
      status = guard.status();
      break;
    }
    guards.push_back(*std::move(guard));
  }
  EXPECT_EQ(guards.size(), SigbusGuard::kCapacity);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  guards.pop_back();
  EXPECT_TRUE(SigbusGuard::Create(mapped.data(), mapped.bytes()).ok());
}

TEST(SigbusGuardTest, MisalignedOrEmptyRangesAreRefused) {
  MappedMemfd mapped(/*pages=*/2);
  EXPECT_EQ(SigbusGuard::Create(mapped.data() + 1, kPage).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SigbusGuard::Create(mapped.data(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

class SigbusGuardDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(SigbusGuardDeathTest, AFaultOutsideEveryGuardStillKills) {
  EXPECT_EXIT(
      {
        // What a daemon starts with (a sanitizer runtime may have put its
        // own reporter there).
        signal(SIGBUS, SIG_DFL);
        MappedMemfd guarded(/*pages=*/2);
        auto guard = SigbusGuard::Create(guarded.data(), guarded.bytes());
        if (!guard.ok()) _exit(3);
        MappedMemfd unguarded(/*pages=*/2);
        unguarded.Truncate();
        ReadAll(unguarded.data(), unguarded.bytes());
        _exit(0);  // not reached
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

TEST_F(SigbusGuardDeathTest, AReleasedGuardNoLongerProtects) {
  EXPECT_EXIT(
      {
        signal(SIGBUS, SIG_DFL);
        MappedMemfd mapped(/*pages=*/2);
        {
          auto guard = SigbusGuard::Create(mapped.data(), mapped.bytes());
          if (!guard.ok()) _exit(3);
        }
        mapped.Truncate();
        ReadAll(mapped.data(), mapped.bytes());
        _exit(0);  // not reached
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

TEST_F(SigbusGuardDeathTest, ASentSigbusStillKills) {
  EXPECT_EXIT(
      {
        signal(SIGBUS, SIG_DFL);
        MappedMemfd guarded(/*pages=*/2);
        auto guard = SigbusGuard::Create(guarded.data(), guarded.bytes());
        if (!guard.ok()) _exit(3);
        raise(SIGBUS);
        _exit(0);  // not reached
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

void ExitWith42(int, siginfo_t*, void*) { _exit(42); }

TEST_F(SigbusGuardDeathTest, FaultsOutsideGuardsGoToThePreviousHandler) {
  EXPECT_EXIT(
      {
        // Installed before the first guard, as a library of the daemon's
        // might have.
        struct sigaction action {};
        action.sa_sigaction = &ExitWith42;
        action.sa_flags = SA_SIGINFO;
        sigaction(SIGBUS, &action, nullptr);
        MappedMemfd guarded(/*pages=*/2);
        auto guard = SigbusGuard::Create(guarded.data(), guarded.bytes());
        if (!guard.ok()) _exit(3);
        guarded.Truncate();
        ReadAll(guarded.data(), guarded.bytes());  // ours: survives
        if (!(*guard)->faulted()) _exit(4);
        MappedMemfd unguarded(/*pages=*/2);
        unguarded.Truncate();
        ReadAll(unguarded.data(), unguarded.bytes());
        _exit(0);  // not reached
      },
      ::testing::ExitedWithCode(42), "");
}

}  // namespace
}  // namespace matmul
