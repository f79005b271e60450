// RegionOpener and the checks it makes for the caller the transport names:
// a shm segment is used only for its owner (or a root caller, or with the
// option), and a cuda_vmm region takes
// descriptors only out of the calling process. The pid check comes before
// any CUDA call, so it is tested here without a GPU.
#include "server/regions/region_opener.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/regions/shm_region.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

constexpr uid_t kNobody = 65534;

PeerCredentials Caller(uid_t uid) { return {getpid(), uid, getgid()}; }

// A shm object of this process's making, removed at the end.
class Segment {
 public:
  explicit Segment(size_t bytes) {
    static std::atomic<int> counter{0};
    name_ =
        absl::StrCat("matmul-openertest-", getpid(), "-", counter.fetch_add(1));
    fd_.reset(shm_open(("/" + name_).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600));
    EXPECT_TRUE(fd_.valid()) << strerror(errno);
    EXPECT_EQ(ftruncate(fd_.get(), static_cast<off_t>(bytes)), 0);
  }
  ~Segment() { shm_unlink(("/" + name_).c_str()); }

  const std::string& name() const { return name_; }
  int fd() const { return fd_.get(); }

  v1::RegisterRegionRequest Request(uint64_t bytes) const {
    v1::RegisterRegionRequest request;
    request.mutable_shm()->set_name(name_);
    request.mutable_shm()->set_size_bytes(bytes);
    return request;
  }

 private:
  std::string name_;
  UniqueFd fd_;
};

// A uid other than ours and other than root.
uid_t SomeoneElse() { return getuid() == kNobody ? kNobody - 1 : kNobody; }

TEST(ShmOwnerTest, ASegmentIsUsedOnlyForItsOwner) {
  Segment segment(1 << 16);
  RegionOpener opener(RegionOpenOptions{});
  // Ours: fine.
  absl::StatusOr<std::unique_ptr<Region>> region =
      opener.Open(segment.Request(4096), Caller(getuid()));
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_TRUE((*region)->CheckIntact().ok());
  // Someone else's: refused, naming both uids.
  const uid_t other = SomeoneElse();
  region = opener.Open(segment.Request(4096), Caller(other));
  ASSERT_FALSE(region.ok());
  EXPECT_EQ(region.status().code(), absl::StatusCode::kPermissionDenied)
      << region.status();
  EXPECT_THAT(std::string(region.status().message()),
              HasSubstr(absl::StrCat("belongs to uid ", getuid(),
                                     " but the caller runs as uid ", other)));
  // A root caller may use any.
  EXPECT_TRUE(opener.Open(segment.Request(4096), Caller(0)).ok());
  // And the option lets anyone.
  RegionOpener lenient(RegionOpenOptions{.shm = {.allow_other_owners = true}});
  EXPECT_TRUE(lenient.Open(segment.Request(4096), Caller(other)).ok());
}

TEST(ShmOwnerTest, ASegmentChownedToAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "fchown to another uid needs root";
  Segment segment(1 << 16);
  ASSERT_EQ(fchown(segment.fd(), kNobody, kNobody), 0) << strerror(errno);
  RegionOpener opener(RegionOpenOptions{});
  // The daemon (root) can open it; the caller does not own it.
  absl::StatusOr<std::unique_ptr<Region>> region =
      opener.Open(segment.Request(4096), Caller(1000));
  ASSERT_FALSE(region.ok());
  EXPECT_EQ(region.status().code(), absl::StatusCode::kPermissionDenied)
      << region.status();
  EXPECT_THAT(std::string(region.status().message()),
              HasSubstr(absl::StrCat("belongs to uid ", kNobody,
                                     " but the caller runs as uid 1000")));
  // Its owner may; with the option, anyone.
  EXPECT_TRUE(opener.Open(segment.Request(4096), Caller(kNobody)).ok());
  RegionOpener lenient(RegionOpenOptions{.shm = {.allow_other_owners = true}});
  EXPECT_TRUE(lenient.Open(segment.Request(4096), Caller(1000)).ok());
}

v1::RegisterRegionRequest VmmRequest(int32_t pid) {
  v1::RegisterRegionRequest request;
  request.mutable_cuda_vmm()->set_pid(pid);
  request.mutable_cuda_vmm()->set_fd(3);
  request.mutable_cuda_vmm()->set_size_bytes(2 << 20);
  return request;
}

TEST(CudaVmmCallerTest, APidOtherThanTheCallersIsRefusedOnAnyBackend) {
  // On the CPU backend the pid is checked before "needs the CUDA backend".
  RegionOpener opener(RegionOpenOptions{});
  const pid_t other = getppid();
  absl::StatusOr<std::unique_ptr<Region>> region =
      opener.Open(VmmRequest(other), Caller(getuid()));
  ASSERT_FALSE(region.ok());
  EXPECT_EQ(region.status().code(), absl::StatusCode::kPermissionDenied)
      << region.status();
  EXPECT_THAT(std::string(region.status().message()),
              HasSubstr(absl::StrCat("names pid ", other,
                                     " but the caller is pid ", getpid())));
  // The caller's own pid gets past the check (and then needs CUDA).
  region = opener.Open(VmmRequest(getpid()), Caller(getuid()));
  EXPECT_EQ(region.status().code(), absl::StatusCode::kFailedPrecondition)
      << region.status();
}

}  // namespace
}  // namespace matmul
