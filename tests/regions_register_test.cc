// RegisterRegion's checks of shm requests: bad object names, a missing
// object, a zero size, ranges past the object, and a request of no kind.
#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "tests/regions_fixture.h"
#include "tests/test_daemon.h"

namespace matmul {
namespace {

using region_tests::RegionTest;

TEST_F(RegionTest, BadShmNames) {
  const std::string long_name = "matmul-" + std::string(200, 'x');
  struct Case {
    std::string name;
    std::string text;
  };
  const Case cases[] = {
      {"", "is empty"},
      {"/", "may hold only letters, digits"},
      {"/" + segment_->name(), "give the name without the leading slash"},
      {".", "dot name"},
      {"..", "dot name"},
      {"matmul/../etc", "may hold only letters, digits"},
      {"matmul-a b", "may hold only letters, digits"},
      {"other-segment", "must start with 'matmul'"},
      {"Matmul-x", "must start with 'matmul'"},
      {long_name, "too long"},
  };
  for (const Case& c : cases) {
    ExpectShmRejected(c.name, 0, 4096, absl::StatusCode::kInvalidArgument,
                      c.text);
  }
  ExpectStillServing();
}

TEST_F(RegionTest, MissingObjectZeroSizeAndRangesPastTheObject) {
  ExpectShmRejected("matmul-no-such-object-9f3c", 0, 4096,
                    absl::StatusCode::kNotFound,
                    "shm_open('/matmul-no-such-object-9f3c')");
  ExpectShmRejected(segment_->name(), 0, 0, absl::StatusCode::kInvalidArgument,
                    "is empty");
  ExpectShmRejected(segment_->name(), 0, kSegmentBytes + 1,
                    absl::StatusCode::kInvalidArgument,
                    absl::StrCat("reaches past the end of '", segment_->name(),
                                 "', which has ", kSegmentBytes, " bytes"));
  ExpectShmRejected(segment_->name(), kSegmentBytes, 1,
                    absl::StatusCode::kInvalidArgument, "reaches past the end");
  // An object removed after the client made it.
  auto gone = SharedMemorySegment::Create(4096);
  ASSERT_TRUE(gone.ok());
  const std::string name = (*gone)->name();
  gone->reset();
  ExpectShmRejected(name, 0, 4096, absl::StatusCode::kNotFound, "shm_open");
}

TEST_F(RegionTest, RequestWithoutAKind) {
  v1::RegisterRegionRequest request;
  request.set_session_id(session_->session_id());
  ExpectRegisterRejected(request, absl::StatusCode::kInvalidArgument,
                         "RegisterRegion needs one of shm, cuda_ipc, "
                         "cuda_vmm or shared");
}

}  // namespace
}  // namespace matmul
