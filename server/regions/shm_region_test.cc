#include "server/regions/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

constexpr char kPrefix[] = "matmul-shm-region-test";

// A shm object of this test's own, filled with random bytes and unlinked
// when the test ends.
class ShmObject {
 public:
  explicit ShmObject(size_t size, std::mt19937_64& rng)
      : name_(absl::StrCat(kPrefix, "-", getpid(), "-", rng())), bytes_(size) {
    for (char& byte : bytes_) byte = static_cast<char>(rng());
    UniqueFd fd(shm_open(("/" + name_).c_str(),
                         O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    EXPECT_TRUE(fd.valid()) << strerror(errno);
    EXPECT_EQ(write(fd.get(), bytes_.data(), size), static_cast<ssize_t>(size));
  }
  ~ShmObject() { shm_unlink(("/" + name_).c_str()); }

  const std::string& name() const { return name_; }
  const std::vector<char>& bytes() const { return bytes_; }

 private:
  const std::string name_;
  std::vector<char> bytes_;
};

PeerCredentials Me() {
  return {.pid = getpid(), .uid = getuid(), .gid = getgid()};
}

TEST(CheckShmNameTest, OnlyPlainNamesUnderThePrefix) {
  EXPECT_TRUE(CheckShmName("matmul-a.b_c", "matmul-").ok());
  for (const std::string& bad : std::vector<std::string>{
           "", ".", "..", "other-a", "matmul-a/b", "matmul-a b", "matmul-\n",
           "matmul-" + std::string(200, 'x')}) {
    EXPECT_EQ(CheckShmName(bad, "matmul-").code(),
              absl::StatusCode::kInvalidArgument)
        << "'" << bad << "'";
  }
  EXPECT_THAT(CheckShmName("other-a", "matmul-").message(),
              HasSubstr("must start with 'matmul-'"));
}

TEST(ShmRegionTest, MapsExactlyTheRangeAtAnUnalignedOffset) {
  std::mt19937_64 rng(std::random_device{}());
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  ShmObject object(3 * page + 123, rng);
  // An offset inside the second page, not a multiple of anything useful.
  const uint64_t offset = page + 1 + rng() % (page - 2);
  const uint64_t size = object.bytes().size() - offset - rng() % 64;
  absl::StatusOr<std::unique_ptr<ShmRegion>> region =
      ShmRegion::Open(object.name(), kPrefix, offset, size, Me());
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ((*region)->kind(), "shm");
  EXPECT_EQ((*region)->size_bytes(), static_cast<int64_t>(size));
  EXPECT_EQ((*region)->device_data(), nullptr);
  EXPECT_EQ(
      std::memcmp((*region)->host_data(), object.bytes().data() + offset, size),
      0);
  EXPECT_EQ((*region)->placement().offset, offset);
  EXPECT_TRUE((*region)->CheckIntact().ok());

  // Writes reach the object: another mapping of it sees them.
  static_cast<char*>((*region)->host_data())[0] ^= 0x5a;
  absl::StatusOr<std::unique_ptr<ShmRegion>> whole =
      ShmRegion::Open(object.name(), kPrefix, 0, object.bytes().size(), Me());
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(static_cast<char*>((*whole)->host_data())[offset],
            static_cast<char>(object.bytes()[offset] ^ 0x5a));
  // Both regions are the same object, which overlap checks rely on.
  EXPECT_EQ((*whole)->placement().object, (*region)->placement().object);
  EXPECT_EQ((*whole)->placement().offset, 0u);
}

TEST(ShmRegionTest, RangesOutsideTheObjectAreRefused) {
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t size = 4096 + rng() % 4096;
  ShmObject object(size, rng);
  struct Range {
    uint64_t offset;
    uint64_t size;
  };
  const uint64_t huge = std::numeric_limits<uint64_t>::max();
  const uint64_t int64_max =
      static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  for (const Range range : {Range{0, 0}, Range{0, size + 1}, Range{size, 1},
                            Range{1, size}, Range{huge, 1}, Range{1, huge},
                            Range{int64_max, 1}, Range{int64_max, int64_max}}) {
    absl::StatusOr<std::unique_ptr<ShmRegion>> region =
        ShmRegion::Open(object.name(), kPrefix, range.offset, range.size, Me());
    EXPECT_EQ(region.status().code(), absl::StatusCode::kInvalidArgument)
        << range.offset << " + " << range.size << ": " << region.status();
  }
  // The last byte alone is inside.
  EXPECT_TRUE(ShmRegion::Open(object.name(), kPrefix, size - 1, 1, Me()).ok());
}

TEST(ShmRegionTest, MissingObjectAndBadNames) {
  std::mt19937_64 rng(std::random_device{}());
  EXPECT_EQ(ShmRegion::Open(absl::StrCat(kPrefix, "-missing-", rng()), kPrefix,
                            0, 1, Me())
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  ShmObject object(64, rng);
  // The object exists, but the daemon's prefix is another.
  EXPECT_EQ(
      ShmRegion::Open(object.name(), "elsewhere-", 0, 1, Me()).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace matmul
