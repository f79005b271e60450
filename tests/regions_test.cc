// Zero-copy regions on the CPU backend, end to end through a real daemon
// and the client's RAII helpers: shm operands checked against FP64, every
// way a region request can be wrong (status code and message), quotas,
// session isolation, and an unregister while a product still reads the
// region.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "client/region_request_builder.h"
#include "client/registered_region.h"
#include "client/request_builder.h"
#include "client/session.h"
#include "client/shared_memory_segment.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/regions/cuda_vmm_layout.h"
#include "tests/test_daemon.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(60);

bool ShmExists(const std::string& name) {
  return access(("/dev/shm/" + name).c_str(), F_OK) == 0;
}

// A daemon, a session on it, and one registered segment.
class RegionTest : public ::testing::Test {
 protected:
  explicit RegionTest(ServerOptions options = TestDaemon::DefaultOptions(),
                      int64_t segment_bytes = kSegmentBytes)
      : segment_bytes_(segment_bytes), daemon_(options) {}

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Session>> session =
        Session::Open(daemon_.client(), "regions_test");
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = *std::move(session);
    absl::StatusOr<std::unique_ptr<SharedMemorySegment>> segment =
        SharedMemorySegment::Create(segment_bytes_);
    ASSERT_TRUE(segment.ok()) << segment.status();
    segment_ = *std::move(segment);
    absl::StatusOr<std::unique_ptr<RegisteredRegion>> region =
        RegisteredRegion::RegisterShm(daemon_.client(), *session_, *segment_);
    ASSERT_TRUE(region.ok()) << region.status();
    region_ = *std::move(region);
  }

  void TearDown() override {
    region_.reset();
    session_.reset();
  }

  // A small product with A, B and C in the region (C at the end).
  RegionRequest SmallInRegion(RegionPlacement placement = {}) {
    auto request = MakeRandomRequest({.m = 5, .n = 6, .k = 7}, rng_);
    EXPECT_TRUE(request.ok());
    auto placed = PlaceInRegion(*request, segment_->bytes(), region_->id(),
                                session_->session_id(), placement);
    EXPECT_TRUE(placed.ok()) << placed.status();
    return *placed;
  }

  // Sends `request`, expects `code` with `text` in the message, then checks
  // that the daemon still serves a region product correctly.
  void ExpectRejected(const v1::MatmulRequest& request, absl::StatusCode code,
                      const std::string& text) {
    absl::StatusOr<v1::MatmulResponse> response =
        daemon_.client().Matmul(request, kTimeout);
    ASSERT_FALSE(response.ok()) << "the daemon accepted a bad request";
    EXPECT_EQ(response.status().code(), code) << response.status();
    EXPECT_THAT(std::string(response.status().message()), HasSubstr(text));
    ExpectStillServing();
  }

  void ExpectStillServing() {
    RegionRequest good = SmallInRegion();
    absl::StatusOr<v1::MatmulResponse> after =
        daemon_.client().Matmul(good.request, kTimeout);
    ASSERT_TRUE(after.ok()) << after.status();
    absl::StatusOr<double> error =
        CheckRegionResponse(good, *after, segment_->bytes());
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_LT(*error, 1e-2);
  }

  absl::StatusOr<v1::RegisterRegionResponse> RegisterShm(
      const std::string& name, uint64_t offset, uint64_t size) {
    v1::RegisterRegionRequest request;
    request.set_session_id(session_->session_id());
    request.mutable_shm()->set_name(name);
    request.mutable_shm()->set_offset_bytes(offset);
    request.mutable_shm()->set_size_bytes(size);
    return daemon_.client().RegisterRegion(request, kTimeout);
  }

  void ExpectRegisterRejected(const v1::RegisterRegionRequest& request,
                              absl::StatusCode code, const std::string& text) {
    absl::StatusOr<v1::RegisterRegionResponse> response =
        daemon_.client().RegisterRegion(request, kTimeout);
    ASSERT_FALSE(response.ok()) << "registered: " << request.ShortDebugString();
    EXPECT_EQ(response.status().code(), code) << response.status();
    EXPECT_THAT(std::string(response.status().message()), HasSubstr(text));
    EXPECT_EQ(daemon_.server().regions().region_count(), 1);
  }

  void ExpectShmRejected(const std::string& name, uint64_t offset,
                         uint64_t size, absl::StatusCode code,
                         const std::string& text) {
    SCOPED_TRACE(absl::StrCat("shm '", name, "' [", offset, ", +", size, ")"));
    v1::RegisterRegionRequest request;
    request.set_session_id(session_->session_id());
    request.mutable_shm()->set_name(name);
    request.mutable_shm()->set_offset_bytes(offset);
    request.mutable_shm()->set_size_bytes(size);
    ExpectRegisterRejected(request, code, text);
  }

  static constexpr int64_t kSegmentBytes = int64_t{8} << 20;

  const int64_t segment_bytes_;
  std::mt19937_64 rng_{2026};
  TestDaemon daemon_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<SharedMemorySegment> segment_;
  std::unique_ptr<RegisteredRegion> region_;
};

// --- products in regions ---------------------------------------------------

ProblemSpec RandomSpec(int index, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> dim(1, 160);
  ProblemSpec spec{.m = dim(rng), .n = dim(rng), .k = dim(rng)};
  spec.transpose_a = index & 1;
  spec.transpose_b = index & 2;
  if (index % 4 == 3) spec.batch = 1 + static_cast<int64_t>(rng() % 4);
  if (index % 3 == 1) spec.alpha = -1.25f;
  if (index % 5 == 2) spec.beta = 0.5f;
  if (index % 2 == 1) spec.out_dtype = DType::kFP32;
  if (spec.batch > 1) {
    spec.broadcast_a = index % 8 == 7;
    spec.broadcast_b = index % 16 == 3;
  }
  if (index % 7 == 4) spec.row_padding = 3;
  return spec;
}

TEST_F(RegionTest, RandomProductsInShmMatchFp64) {
  // Every mix of inline and region operands, rotating over random shapes,
  // the four transposes, batches, broadcasts, alpha/beta and both outputs.
  const RegionPlacement placements[] = {
      {.a = true, .b = true, .c = true},   {.a = true, .b = false, .c = true},
      {.a = false, .b = true, .c = true},  {.a = false, .b = false, .c = true},
      {.a = true, .b = true, .c = false},  {.a = true, .b = false, .c = false},
      {.a = false, .b = true, .c = false},
  };
  constexpr int kProducts = 56;  // each placement with each transpose pair
  int in_place = 0;
  for (int i = 0; i < kProducts; ++i) {
    ProblemSpec spec = RandomSpec(i, rng_);
    const RegionPlacement placement = placements[(i / 4) % 7];
    SCOPED_TRACE(absl::StrCat(ProblemSpecName(spec), " A:", placement.a,
                              " B:", placement.b, " C:", placement.c));
    absl::StatusOr<v1::MatmulRequest> request = MakeRandomRequest(spec, rng_);
    ASSERT_TRUE(request.ok()) << request.status();
    request->set_request_id(i);
    // A varying base offset, so operands do not always start the region.
    const uint64_t base = (rng_() % 64) * 2;
    absl::StatusOr<RegionRequest> placed =
        PlaceInRegion(*request, segment_->bytes(), region_->id(),
                      session_->session_id(), placement, base);
    ASSERT_TRUE(placed.ok()) << placed.status();
    absl::StatusOr<v1::MatmulResponse> response =
        daemon_.client().Matmul(placed->request, kTimeout);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->request_id(), static_cast<uint64_t>(i));
    // An output written in place does not travel back inline.
    EXPECT_EQ(response->has_c(), !placement.c);
    absl::StatusOr<double> error =
        CheckRegionResponse(*placed, *response, segment_->bytes());
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_LT(*error, DefaultTolerance(spec.resolved_out_dtype()));
    in_place += placement.c;
  }
  EXPECT_EQ(in_place, 32);
}

TEST_F(RegionTest, RegionAtAnUnalignedOffsetOfItsObject) {
  // The daemon maps from the page holding the region's first byte; the
  // region's byte 0 must still be the object's byte `offset`.
  constexpr uint64_t kOffset = 4096 + 130;
  absl::StatusOr<std::unique_ptr<RegisteredRegion>> inner =
      RegisteredRegion::RegisterShm(daemon_.client(), *session_, *segment_,
                                    kOffset, 1 << 20);
  ASSERT_TRUE(inner.ok()) << inner.status();
  EXPECT_EQ((*inner)->size_bytes(), uint64_t{1} << 20);
  auto request = MakeRandomRequest(
      {.m = 33, .n = 17, .k = 65, .transpose_b = true, .beta = 1.0f}, rng_);
  ASSERT_TRUE(request.ok());
  absl::Span<char> memory = segment_->bytes().subspan(kOffset, 1 << 20);
  auto placed = PlaceInRegion(*request, memory, (*inner)->id(),
                              session_->session_id(), {});
  ASSERT_TRUE(placed.ok()) << placed.status();
  auto response = daemon_.client().Matmul(placed->request, kTimeout);
  ASSERT_TRUE(response.ok()) << response.status();
  auto error = CheckRegionResponse(*placed, *response, memory);
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_LT(*error, 1e-2);
}

TEST_F(RegionTest, ListRegionsAndUnregister) {
  auto listed = daemon_.client().ListRegions(session_->session_id(), kTimeout);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->regions_size(), 1);
  EXPECT_EQ(listed->regions(0).region_id(), region_->id());
  EXPECT_EQ(listed->regions(0).kind(), "shm");
  EXPECT_EQ(listed->regions(0).size_bytes(),
            static_cast<uint64_t>(kSegmentBytes));
  EXPECT_EQ(listed->regions(0).requests_in_flight(), 0);
  EXPECT_EQ(region_->id().size(), 32u);        // 128 random bits, hex
  EXPECT_EQ(MappingsOf(segment_->name()), 2);  // ours and the daemon's

  const RegionRequest placed = SmallInRegion();
  auto deferred = region_->Unregister();
  ASSERT_TRUE(deferred.ok()) << deferred.status();
  EXPECT_FALSE(*deferred);  // nothing in flight
  EXPECT_EQ(region_->Unregister().status().code(),
            absl::StatusCode::kFailedPrecondition);
  listed = daemon_.client().ListRegions(session_->session_id(), kTimeout);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->regions_size(), 0);
  EXPECT_EQ(daemon_.server().regions().region_count(), 0);
  EXPECT_EQ(MappingsOf(segment_->name()), 1);  // the daemon unmapped it
  // Gone for good: the id no longer resolves.
  auto response = daemon_.client().Matmul(placed.request, kTimeout);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(response.status().message()),
              HasSubstr("is not registered in this session"));
  v1::UnregisterRegionRequest again;
  again.set_session_id(session_->session_id());
  again.set_region_id(region_->id());
  EXPECT_EQ(daemon_.client().UnregisterRegion(again, kTimeout).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(RegionTest, ObjectMayBeUnlinkedAfterRegistration) {
  // Unlinking right after registering (crash safety) keeps both mappings.
  segment_->Unlink();
  EXPECT_FALSE(ShmExists(segment_->name()));
  ExpectStillServing();
}

// --- who may use a region ---------------------------------------------------

TEST_F(RegionTest, RegionsAreInvisibleToOtherSessions) {
  auto other = Session::Open(daemon_.client(), "intruder");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE((*other)->session_id(), session_->session_id());
  EXPECT_EQ(daemon_.server().regions().session_count(), 2);

  RegionRequest placed = SmallInRegion();
  placed.request.set_session_id((*other)->session_id());
  ExpectRejected(placed.request, absl::StatusCode::kNotFound,
                 absl::StrCat("region '", region_->id(),
                              "' is not registered in this session"));

  v1::UnregisterRegionRequest unregister;
  unregister.set_session_id((*other)->session_id());
  unregister.set_region_id(region_->id());
  EXPECT_EQ(
      daemon_.client().UnregisterRegion(unregister, kTimeout).status().code(),
      absl::StatusCode::kNotFound);
  auto listed = daemon_.client().ListRegions((*other)->session_id(), kTimeout);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->regions_size(), 0);
  // Still registered, and still ours.
  EXPECT_EQ(daemon_.server().regions().region_count(), 1);
  ExpectStillServing();
}

TEST_F(RegionTest, UnknownSessionOrRegion) {
  RegionRequest placed = SmallInRegion();
  v1::MatmulRequest request = placed.request;
  request.set_session_id("0123456789abcdef0123456789abcdef");
  ExpectRejected(request, absl::StatusCode::kNotFound, "unknown session");

  request = placed.request;
  request.mutable_b()->mutable_region()->set_region_id(
      "00000000000000000000000000000000");
  ExpectRejected(request, absl::StatusCode::kNotFound,
                 "region '00000000000000000000000000000000' is not registered "
                 "in this session");

  request = placed.request;
  request.clear_session_id();
  ExpectRejected(
      request, absl::StatusCode::kInvalidArgument,
      "names region '" + region_->id() + "' but the request has no session_id");

  request = placed.request;
  request.mutable_a()->mutable_region()->clear_region_id();
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "A: region reference without a region_id");

  // The region RPCs with an unknown session.
  auto registered = RegisterShm(segment_->name(), 0, 4096);
  ASSERT_TRUE(registered.ok());  // our own session works...
  v1::RegisterRegionRequest stranger;
  stranger.set_session_id("feedfacefeedfacefeedfacefeedface");
  stranger.mutable_shm()->set_name(segment_->name());
  stranger.mutable_shm()->set_size_bytes(4096);
  auto refused = daemon_.client().RegisterRegion(stranger, kTimeout);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("unknown session"));
  EXPECT_EQ(daemon_.client()
                .ListRegions("feedfacefeedfacefeedfacefeedface", kTimeout)
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(daemon_.client().ListRegions("", kTimeout).status().code(),
            absl::StatusCode::kNotFound);
}

// --- extents
// ------------------------------------------------------------------

TEST_F(RegionTest, ExtentsOutsideTheRegion) {
  const RegionRequest placed = SmallInRegion();
  const uint64_t size = static_cast<uint64_t>(kSegmentBytes);
  v1::MatmulRequest request = placed.request;
  // A is 5x7 BF16 = 70 bytes: the last one that fits starts at size - 70.
  request.mutable_a()->mutable_region()->set_offset_bytes(size - 70);
  ASSERT_TRUE(daemon_.client().Matmul(request, kTimeout).ok());
  request.mutable_a()->mutable_region()->set_offset_bytes(size - 68);
  ExpectRejected(
      request, absl::StatusCode::kInvalidArgument,
      absl::StrCat("A: bytes [", size - 68, ", +70) reach outside region '",
                   region_->id(), "' of ", size, " bytes"));
  request.mutable_a()->mutable_region()->set_offset_bytes(size);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "reach outside region");
  request.mutable_a()->mutable_region()->set_offset_bytes(size * 4);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "reach outside region");
  // An offset that would wrap around 64 bits with the extent added.
  request = placed.request;
  request.mutable_b()->mutable_region()->set_offset_bytes(~uint64_t{0} - 1);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "B: bytes [18446744073709551614, +84) reach outside region");
  // C (the output) as well.
  request = placed.request;
  request.mutable_c()->mutable_region()->set_offset_bytes(size - 58);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument, "C: bytes [");
  // Strides that reach past the end from a valid offset.
  request = placed.request;
  // (B's 7 rows 2^20 elements apart span 12 MiB; the region has 8.)
  request.mutable_b()->add_strides(int64_t{1} << 20);
  request.mutable_b()->add_strides(1);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "reach outside region");
}

TEST_F(RegionTest, OffsetsThatAreNotMultiplesOfTheElementSize) {
  const RegionRequest placed = SmallInRegion();
  v1::MatmulRequest request = placed.request;
  request.mutable_a()->mutable_region()->set_offset_bytes(1);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "A: region offset 1 is not a multiple of the element size 2");
  request = placed.request;
  request.mutable_b()->mutable_region()->set_offset_bytes(4097);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "B: region offset 4097 is not a multiple of the element "
                 "size 2");
  // An FP32 output needs 4-byte steps: 2 is fine for BF16, not for it.
  request = placed.request;
  request.set_out_dtype(v1::DTYPE_FP32);
  request.mutable_c()->set_dtype(v1::DTYPE_FP32);
  request.mutable_c()->mutable_region()->set_offset_bytes(4098);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "C: region offset 4098 is not a multiple of the element "
                 "size 4");
}

TEST_F(RegionTest, SizesThatOverflow) {
  const RegionRequest placed = SmallInRegion();
  v1::MatmulRequest request = placed.request;
  // Dimensions in range each, strides whose span overflows int64.
  request.mutable_a()->clear_shape();
  for (int i = 0; i < 3; ++i) request.mutable_a()->add_shape(int64_t{1} << 23);
  request.mutable_a()->add_strides(int64_t{1} << 62);
  request.mutable_a()->add_strides(int64_t{1} << 30);
  request.mutable_a()->add_strides(1);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "overflows 64 bits");
  // An extent that fits int64 but not the region (nor the tensor limit).
  request = placed.request;
  request.mutable_b()->add_strides(int64_t{1} << 60);
  request.mutable_b()->add_strides(1);
  absl::StatusOr<v1::MatmulResponse> response =
      daemon_.client().Matmul(request, kTimeout);
  ASSERT_FALSE(response.ok());
  EXPECT_TRUE(response.status().code() == absl::StatusCode::kInvalidArgument ||
              response.status().code() == absl::StatusCode::kResourceExhausted)
      << response.status();
  // RegisterRegion: offset + size past 2^64, and past int64.
  ExpectShmRejected(segment_->name(), ~uint64_t{0} - 10, 100,
                    absl::StatusCode::kInvalidArgument,
                    "is empty or overflows");
  ExpectShmRejected(segment_->name(), uint64_t{1} << 62, uint64_t{1} << 62,
                    absl::StatusCode::kInvalidArgument,
                    "is empty or overflows");
  ExpectStillServing();
}

TEST_F(RegionTest, OutputOverlappingAnInput) {
  const RegionRequest placed = SmallInRegion();
  v1::MatmulRequest request = placed.request;
  request.mutable_c()->mutable_region()->set_offset_bytes(
      placed.a_offset_bytes + 8);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "C overlaps A or B in memory");
  request = placed.request;
  request.mutable_c()->mutable_region()->set_offset_bytes(
      placed.b_offset_bytes);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "C overlaps A or B in memory");
  // With beta != 0 as well (C read and written): still refused.
  request.set_beta(1.0f);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "C overlaps A or B in memory");
  // A and B may share bytes (both only read).
  request = placed.request;
  request.mutable_b()->mutable_region()->set_offset_bytes(
      placed.a_offset_bytes);
  auto response = daemon_.client().Matmul(request, kTimeout);
  EXPECT_TRUE(response.ok()) << response.status();
  // C right after B's last byte (84 bytes) does not overlap.
  request = placed.request;
  request.mutable_c()->mutable_region()->set_offset_bytes(
      placed.b_offset_bytes + 84);
  response = daemon_.client().Matmul(request, kTimeout);
  EXPECT_TRUE(response.ok()) << response.status();
}

// Two registrations of one shm object are two mappings at different
// addresses: the overlap check must compare the object, not addresses.
TEST_F(RegionTest, OutputAliasingAnInputThroughAnotherRegion) {
  const RegionRequest placed = SmallInRegion();
  auto alias =
      RegisteredRegion::RegisterShm(daemon_.client(), *session_, *segment_);
  ASSERT_TRUE(alias.ok()) << alias.status();
  v1::MatmulRequest request = placed.request;
  request.mutable_c()->mutable_region()->set_region_id((*alias)->id());
  request.mutable_c()->mutable_region()->set_offset_bytes(
      placed.a_offset_bytes);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "C overlaps A or B in memory");
}

// --- RegisterRegion -------------------------------------------------------

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
                         "RegisterRegion needs one of shm, cuda_ipc or "
                         "cuda_vmm");
}

TEST_F(RegionTest, CudaKindsOnTheCpuBackend) {
  v1::RegisterRegionRequest request;
  request.set_session_id(session_->session_id());
  // A malformed handle is malformed whatever the backend.
  for (size_t length : {0, 16, 63, 65}) {
    SCOPED_TRACE(length);
    request.mutable_cuda_ipc()->set_handle(std::string(length, '\x01'));
    request.mutable_cuda_ipc()->set_size_bytes(1 << 20);
    ExpectRegisterRejected(
        request, absl::StatusCode::kInvalidArgument,
        absl::StrCat("cuda_ipc handle has ", length, " bytes; expected 64"));
  }
  // A well-formed one cannot be served here.
  request.mutable_cuda_ipc()->set_handle(std::string(64, '\x01'));
  ExpectRegisterRejected(request, absl::StatusCode::kFailedPrecondition,
                         "CUDA regions need a daemon on the CUDA backend");
  request.mutable_cuda_vmm()->set_pid(getpid());
  request.mutable_cuda_vmm()->set_fd(0);
  request.mutable_cuda_vmm()->set_size_bytes(2 << 20);
  ExpectRegisterRejected(request, absl::StatusCode::kFailedPrecondition,
                         "CUDA regions need a daemon on the CUDA backend");
  // So can a well-formed chunked one (an expandable segment of PyTorch).
  request.mutable_cuda_vmm()->set_fd(0);
  request.mutable_cuda_vmm()->add_chunk_fds(7);
  request.mutable_cuda_vmm()->add_chunk_fds(8);
  request.mutable_cuda_vmm()->set_chunk_bytes(20 << 20);
  request.mutable_cuda_vmm()->set_size_bytes(40 << 20);
  ExpectRegisterRejected(request, absl::StatusCode::kFailedPrecondition,
                         "CUDA regions need a daemon on the CUDA backend");
  ExpectStillServing();
}

// The daemon takes descriptors only out of the calling process: a cuda_vmm
// request naming another pid is refused, on any backend, before CUDA.
TEST_F(RegionTest, CudaVmmNamingAnotherProcessIsRefused) {
  v1::RegisterRegionRequest request;
  request.set_session_id(session_->session_id());
  request.mutable_cuda_vmm()->set_pid(getppid());
  request.mutable_cuda_vmm()->set_fd(0);
  request.mutable_cuda_vmm()->set_size_bytes(2 << 20);
  ExpectRegisterRejected(request, absl::StatusCode::kPermissionDenied,
                         absl::StrCat("names pid ", getppid(),
                                      " but the caller is pid ", getpid()));
  ExpectStillServing();
}

// A malformed cuda_vmm request is refused before any CUDA or pidfd call, so
// the CPU backend checks it exactly as the CUDA one does.
TEST_F(RegionTest, MalformedCudaVmmRequests) {
  struct Case {
    const char* what;
    int32_t pid;
    int32_t fd;
    std::vector<int32_t> chunk_fds;
    uint64_t chunk_bytes;
    uint64_t size_bytes;
    const char* message;
  };
  const int32_t pid = getpid();
  const uint64_t kChunk = uint64_t{20} << 20;
  const std::vector<Case> cases = {
      {"no pid", 0, 3, {}, 0, 2 << 20, "needs the client's pid (> 0); got 0"},
      {"negative pid", -5, 3, {}, 0, 2 << 20, "got -5"},
      {"negative fd",
       pid,
       -1,
       {},
       0,
       2 << 20,
       "one allocation needs fd >= 0 and size_bytes > 0; got fd -1"},
      {"zero size", pid, 3, {}, 0, 0, "got fd 3, size_bytes 0"},
      {"chunk_bytes without chunk_fds",
       pid,
       3,
       {},
       kChunk,
       kChunk,
       "chunk_bytes (20971520) needs chunk_fds"},
      {"fd and chunk_fds",
       pid,
       3,
       {4, 5},
       kChunk,
       2 * kChunk,
       "set either fd (one allocation) or chunk_fds, not both; got fd 3 and "
       "2 chunk_fds"},
      {"negative chunk fd",
       pid,
       0,
       {4, -2, 6},
       kChunk,
       3 * kChunk,
       "chunk_fds[1] is -2"},
      {"no chunk_bytes",
       pid,
       0,
       {4, 5},
       0,
       kChunk,
       "chunk_fds need chunk_bytes > 0"},
      {"size beyond the chunks",
       pid,
       0,
       {4, 5},
       kChunk,
       2 * kChunk + 1,
       "size_bytes 41943041 does not match 2 chunk(s) of 20971520 bytes: "
       "expected more than 20971520 and at most 41943040"},
      {"a chunk holding none of the region",
       pid,
       0,
       {4, 5, 6},
       kChunk,
       2 * kChunk,
       "expected more than 41943040 and at most 62914560"},
      {"no size", pid, 0, {4}, kChunk, 0, "size_bytes 0 does not match"},
      {"chunks that overflow",
       pid,
       0,
       {4, 5},
       uint64_t{1} << 63,
       uint64_t{1} << 63,
       "overflows 63-bit sizes"},
      {"one allocation over int64",
       pid,
       3,
       {},
       0,
       uint64_t{1} << 63,
       "overflows 63-bit sizes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    v1::RegisterRegionRequest request;
    request.set_session_id(session_->session_id());
    v1::CudaVmmRegion* vmm = request.mutable_cuda_vmm();
    vmm->set_pid(c.pid);
    vmm->set_fd(c.fd);
    for (int32_t fd : c.chunk_fds) vmm->add_chunk_fds(fd);
    vmm->set_chunk_bytes(c.chunk_bytes);
    vmm->set_size_bytes(c.size_bytes);
    ExpectRegisterRejected(request, absl::StatusCode::kInvalidArgument,
                           c.message);
  }
  // Bounded: one more chunk than the daemon takes.
  v1::RegisterRegionRequest many;
  many.set_session_id(session_->session_id());
  many.mutable_cuda_vmm()->set_pid(pid);
  for (int i = 0; i <= kMaxCudaVmmChunks; ++i) {
    many.mutable_cuda_vmm()->add_chunk_fds(3);
  }
  many.mutable_cuda_vmm()->set_chunk_bytes(2 << 20);
  many.mutable_cuda_vmm()->set_size_bytes(uint64_t{2 << 20} *
                                          (kMaxCudaVmmChunks + 1));
  ExpectRegisterRejected(
      many, absl::StatusCode::kInvalidArgument,
      absl::StrCat("has ", kMaxCudaVmmChunks + 1, " chunk_fds; at most ",
                   kMaxCudaVmmChunks, " are accepted"));
  ExpectStillServing();
}

// --- quotas
// -------------------------------------------------------------------

class QuotaTest : public RegionTest {
 protected:
  static ServerOptions Options() {
    ServerOptions options = TestDaemon::DefaultOptions();
    options.regions.max_regions_per_session = 3;
    options.regions.max_bytes_per_session = kSegmentBytes + (1 << 20);
    return options;
  }
  QuotaTest() : RegionTest(Options()) {}
};

TEST_F(QuotaTest, RegionCountAndBytesPerSession) {
  // The fixture's region holds kSegmentBytes; 1 MiB of quota is left.
  auto small = RegisterShm(segment_->name(), 0, 512 << 10);
  ASSERT_TRUE(small.ok()) << small.status();
  auto too_big = RegisterShm(segment_->name(), 0, (512 << 10) + 1);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(too_big.status().message()),
              HasSubstr("would exceed the session's quota of"));
  auto third = RegisterShm(segment_->name(), 0, 4096);
  ASSERT_TRUE(third.ok()) << third.status();
  auto fourth = RegisterShm(segment_->name(), 0, 4096);
  EXPECT_EQ(fourth.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(fourth.status().message()),
              HasSubstr("the session already has 3 regions, the most one "
                        "session may register"));
  EXPECT_EQ(daemon_.server().regions().region_count(), 3);
  // Quotas are per session: another one starts from zero.
  auto other = Session::Open(daemon_.client(), "other");
  ASSERT_TRUE(other.ok());
  auto elsewhere = RegisteredRegion::RegisterShm(daemon_.client(), **other,
                                                 *segment_, 0, 4096);
  EXPECT_TRUE(elsewhere.ok()) << elsewhere.status();
  // Unregistering gives room back.
  v1::UnregisterRegionRequest unregister;
  unregister.set_session_id(session_->session_id());
  unregister.set_region_id(small->region_id());
  ASSERT_TRUE(daemon_.client().UnregisterRegion(unregister, kTimeout).ok());
  // Exactly up to the quota (8 MiB + 4 KiB held, 1 MiB - 4 KiB more).
  auto again = RegisterShm(segment_->name(), 0, (1 << 20) - 4096);
  EXPECT_TRUE(again.ok()) << again.status();
  ExpectStillServing();
}

// --- unregister while in use ---------------------------------------------

class InFlightTest : public RegionTest {
 protected:
  static ServerOptions Options() {
    ServerOptions options = TestDaemon::DefaultOptions();
    options.executor.worker_threads = 1;  // the CPU backend runs 1 thread
    return options;
  }
  // Room for the slow product's 40 MiB of operands.
  InFlightTest() : RegionTest(Options(), int64_t{48} << 20) {}
};

// Relative error of the product at `samples` random (batch 0) elements:
// the full FP64 reference of a product big enough to be slow is slower
// still.
double SampledError(const v1::MatmulRequest& reference, const v1::Tensor& c,
                    int samples, std::mt19937_64& rng) {
  absl::StatusOr<GemmProblem> problem = GemmProblemFromRequest(reference);
  absl::StatusOr<HostMatrix> a = ReadHostMatrix(reference.a());
  absl::StatusOr<HostMatrix> b = ReadHostMatrix(reference.b());
  absl::StatusOr<HostMatrix> result = ReadHostMatrix(c);
  if (!problem.ok() || !a.ok() || !b.ok() || !result.ok()) return INFINITY;
  double error = 0, norm = 0;
  for (int s = 0; s < samples; ++s) {
    const int64_t i = static_cast<int64_t>(rng() % problem->m);
    const int64_t j = static_cast<int64_t>(rng() % problem->n);
    double sum = 0;
    for (int64_t k = 0; k < problem->k; ++k) {
      const double x =
          reference.transpose_a() ? a->at(0, k, i) : a->at(0, i, k);
      const double y =
          reference.transpose_b() ? b->at(0, j, k) : b->at(0, k, j);
      sum += x * y;
    }
    const double got = result->at(0, i, j);
    error += (got - sum) * (got - sum);
    norm += sum * sum;
  }
  return std::sqrt(error / norm);
}

TEST_F(InFlightTest, UnregisterWhileAProductReadsTheRegionIsDeferred) {
  // ~34 GFLOP on one OpenBLAS thread: about a second (more on a loaded
  // machine), while the steps below take milliseconds. Operands and output
  // all in the region.
  auto request = MakeRandomRequest(
      {.m = 2048, .n = 2048, .k = 4096, .transpose_b = true}, rng_);
  ASSERT_TRUE(request.ok());
  auto placed = PlaceInRegion(*request, segment_->bytes(), region_->id(),
                              session_->session_id(), {});
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_EQ(MappingsOf(segment_->name()), 2);
  auto running = daemon_.client().MatmulFuture(placed->request, kTimeout);
  ASSERT_TRUE(WaitFor([&] { return daemon_.server().running() == 1; },
                      absl::Seconds(30)));
  auto listed = daemon_.client().ListRegions(session_->session_id(), kTimeout);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->regions_size(), 1);
  // >= 1, not == 1: the daemon counts one reference per operand in the
  // region (3 here); see RequestsInFlightCountsRequests below.
  EXPECT_GE(listed->regions(0).requests_in_flight(), 1);

  absl::StatusOr<bool> deferred = region_->Unregister();
  ASSERT_TRUE(deferred.ok()) << deferred.status();
  EXPECT_TRUE(*deferred);
  // Gone from the session at once...
  listed = daemon_.client().ListRegions(session_->session_id(), kTimeout);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->regions_size(), 0);
  EXPECT_EQ(daemon_.server().regions().region_count(), 0);
  auto refused = daemon_.client().Matmul(SmallInRegion().request, kTimeout);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kNotFound);
  // ...while the product still has the memory, and completes correctly.
  EXPECT_EQ(MappingsOf(segment_->name()), 2);
  absl::StatusOr<v1::MatmulResponse> response = running.get();
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_FALSE(response->has_c());
  auto c = ResultTensor(*placed, *response, segment_->bytes());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_LT(SampledError(placed->reference, *c, 200, rng_), 1e-2);
  // Then the daemon lets go of the mapping.
  EXPECT_TRUE(WaitFor([&] { return MappingsOf(segment_->name()) == 1; }));
}

TEST_F(InFlightTest, UnregisterOfAQueuedRequestsRegionIsDeferred) {
  // A slow inline product holds the only worker; a checked region product
  // waits behind it, holding its region, while the region is unregistered.
  auto slow = MakeRandomRequest({.m = 2048, .n = 2048, .k = 4096}, rng_);
  ASSERT_TRUE(slow.ok());
  auto blocker = daemon_.client().MatmulFuture(*slow, kTimeout);
  ASSERT_TRUE(WaitFor([&] { return daemon_.server().running() == 1; },
                      absl::Seconds(30)));
  auto request = MakeRandomRequest(
      {.m = 64, .n = 96, .k = 80, .transpose_a = true, .beta = -0.5f}, rng_);
  auto placed = PlaceInRegion(*request, segment_->bytes(), region_->id(),
                              session_->session_id(), {});
  ASSERT_TRUE(placed.ok());
  auto queued = daemon_.client().MatmulFuture(placed->request, kTimeout);
  ASSERT_TRUE(WaitFor([&] { return daemon_.server().queue_depth() == 1; }));
  absl::StatusOr<bool> deferred = region_->Unregister();
  ASSERT_TRUE(deferred.ok()) << deferred.status();
  EXPECT_TRUE(*deferred);
  ASSERT_TRUE(blocker.get().ok());
  auto response = queued.get();
  ASSERT_TRUE(response.ok()) << response.status();
  auto error = CheckRegionResponse(*placed, *response, segment_->bytes());
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_LT(*error, 1e-2);
  EXPECT_TRUE(WaitFor([&] { return MappingsOf(segment_->name()) == 1; }));
}

// One request with A, B and C in the same region is one request in flight.
TEST_F(InFlightTest, RequestsInFlightCountsRequests) {
  auto request = MakeRandomRequest({.m = 2048, .n = 2048, .k = 4096}, rng_);
  ASSERT_TRUE(request.ok());
  auto placed = PlaceInRegion(*request, segment_->bytes(), region_->id(),
                              session_->session_id(), {});
  ASSERT_TRUE(placed.ok()) << placed.status();
  auto running = daemon_.client().MatmulFuture(placed->request, kTimeout);
  ASSERT_TRUE(WaitFor([&] { return daemon_.server().running() == 1; },
                      absl::Seconds(30)));
  auto listed = daemon_.client().ListRegions(session_->session_id(), kTimeout);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->regions_size(), 1);
  EXPECT_EQ(listed->regions(0).requests_in_flight(), 1);
  ASSERT_TRUE(running.get().ok());
}

// --- sessions end
// -------------------------------------------------------------

TEST_F(RegionTest, ClosingTheSessionReleasesItsRegions) {
  auto second = RegisteredRegion::RegisterShm(daemon_.client(), *session_,
                                              *segment_, 8192, 8192);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(daemon_.server().regions().region_count(), 2);
  EXPECT_EQ(MappingsOf(segment_->name()), 3);
  // Regions left registered on purpose: the session's end must free them.
  const std::string name = segment_->name();
  session_.reset();
  EXPECT_TRUE(WaitFor([&] {
    return daemon_.server().regions().session_count() == 0 &&
           daemon_.server().regions().region_count() == 0;
  }));
  EXPECT_TRUE(WaitFor([&] { return MappingsOf(name) == 1; }));
  // The wrappers' late UnregisterRegion meets NOT_FOUND, silently.
  second->reset();
  region_.reset();
}

TEST(SessionTest, DaemonShutdownEndsTheSession) {
  auto daemon = std::make_unique<TestDaemon>();
  auto session = Session::Open(daemon->client(), "shutdown");
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_TRUE((*session)->alive());
  EXPECT_EQ(daemon->server().regions().session_count(), 1);
  daemon->server().Shutdown(absl::Seconds(5));
  EXPECT_TRUE(WaitFor([&] { return !(*session)->alive(); }));
  session->reset();  // after the daemon ended the stream: returns at once
}

TEST(SessionTest, OpenFailsWithoutADaemon) {
  auto client = Client::Create("unix:" + FreshSocketPath());
  ASSERT_TRUE(client.ok());
  auto session = Session::Open(**client, "nobody", absl::Seconds(5));
  EXPECT_EQ(session.status().code(), absl::StatusCode::kUnavailable)
      << session.status();
}

TEST(SharedMemorySegmentTest, CreateMapsZeroedMemoryAndUnlinks) {
  auto segment = SharedMemorySegment::Create(10000, "matmul.test");
  ASSERT_TRUE(segment.ok()) << segment.status();
  const std::string name = (*segment)->name();
  EXPECT_THAT(name, ::testing::StartsWith("matmul.test-"));
  EXPECT_TRUE(ShmExists(name));
  EXPECT_EQ((*segment)->size_bytes(), 10000);
  EXPECT_EQ((*segment)->data()[9999], 0);
  (*segment)->data()[9999] = 42;
  segment->reset();
  EXPECT_FALSE(ShmExists(name));
  EXPECT_EQ(SharedMemorySegment::Create(0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemorySegment::Create(1, "bad/prefix").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace matmul
