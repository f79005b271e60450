// Region operands through ValidateRequest and BoundOperands::Bind against
// fake in-memory regions: whatever offsets, shapes and strides a request
// names, an operand that binds lies inside its region (every element is
// read or written here, in a buffer exactly the region's size, so a byte
// outside is an AddressSanitizer report), and an output never shares a byte
// with an input, also when two regions are views of one object.
//
// Input: [4 sizes and offsets of the regions: 16 bytes][serialized
// MatmulRequest]. Each tensor's region_id picks a fake region by its first
// byte; the session is always the fake regions' own.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "matmul/v1/matmul.pb.h"
#include "server/product/bound_operands.h"
#include "server/product/request_validation.h"
#include "server/regions/region.h"
#include "server/regions/region_registry.h"
#include "tests/fuzz/fuzz_check.h"

namespace matmul {
namespace {

constexpr int kRegions = 4;
constexpr size_t kObjectBytes = 1 << 14;

// The memory behind the regions: one heap buffer of exactly `bytes`, so
// ASan flags any access past it, and a byte map of what inputs touched.
struct FakeObject {
  explicit FakeObject(size_t bytes)
      : data(std::make_unique<char[]>(bytes)), size(bytes), read(bytes) {}
  std::unique_ptr<char[]> data;
  size_t size;
  std::vector<bool> read;
};

// A host region over [offset, offset + size) of a FakeObject.
class FakeRegion final : public Region {
 public:
  FakeRegion(FakeObject& object, std::string name, uint64_t offset,
             int64_t size)
      : object_(object), name_(std::move(name)), offset_(offset), size_(size) {}
  std::string kind() const override { return "shm"; }
  int64_t size_bytes() const override { return size_; }
  void* host_data() const override { return object_.data.get() + offset_; }
  void* device_data() const override { return nullptr; }
  Placement placement() const override { return {name_, offset_}; }

 private:
  FakeObject& object_;
  const std::string name_;
  const uint64_t offset_;
  const int64_t size_;
};

uint32_t Read32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Points a tensor's region reference at fake region `ids[first byte]`.
void Retarget(v1::Tensor* tensor, const std::vector<std::string>& ids) {
  if (!tensor->has_region()) return;
  const std::string& id = tensor->region().region_id();
  const uint8_t pick = id.empty() ? 0 : static_cast<uint8_t>(id[0]);
  tensor->mutable_region()->set_region_id(ids[pick % ids.size()]);
}

}  // namespace
}  // namespace matmul

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  matmul::fuzz::QuietProtobufLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace matmul;
  constexpr size_t kHeader = 4 * kRegions;
  if (size < kHeader) return 0;
  v1::MatmulRequest request;
  if (!request.ParseFromArray(data + kHeader,
                              static_cast<int>(size - kHeader))) {
    return 0;
  }
  // Two objects; regions 0 and 1 are views of the first (as one shm
  // object registered twice), 2 and 3 of the second.
  FakeObject objects[2] = {FakeObject(kObjectBytes), FakeObject(kObjectBytes)};
  RegionRegistry registry(RegionRegistryOptions{});
  const PeerCredentials owner{
      .pid = getpid(), .uid = getuid(), .gid = getgid()};
  const std::string session = registry.OpenSession("fuzz", owner);
  std::vector<std::string> ids;
  for (int r = 0; r < kRegions; ++r) {
    const uint32_t word = Read32(data + 4 * r);
    const size_t offset = (word & 0xffff) % kObjectBytes;
    const size_t bytes = (word >> 16) % (kObjectBytes - offset + 1);
    FakeObject& object = objects[r / 2];
    absl::StatusOr<std::string> id = registry.Add(
        session, owner,
        std::make_shared<FakeRegion>(object, r / 2 == 0 ? "object0" : "object1",
                                     offset, static_cast<int64_t>(bytes)));
    FUZZ_CHECK(id.ok());
    ids.push_back(*id);
  }
  request.set_session_id(session);
  // (mutable_x() would add an absent operand.)
  if (request.has_a()) Retarget(request.mutable_a(), ids);
  if (request.has_b()) Retarget(request.mutable_b(), ids);
  if (request.has_c()) Retarget(request.mutable_c(), ids);

  ValidationLimits limits;
  limits.max_dimension = 32;
  limits.max_tensor_bytes = 1 << 16;
  limits.max_message_bytes = 1 << 16;
  absl::StatusOr<MatmulPlan> plan = ValidateRequest(request, limits);
  if (!plan.ok()) return 0;
  absl::StatusOr<std::unique_ptr<BoundOperands>> bound =
      BoundOperands::Bind(*plan, request, registry, /*device_pointers=*/false);
  if (!bound.ok()) {
    FUZZ_CHECK(!bound.status().message().empty());
    return 0;
  }
  const GemmProblem& p = (*bound)->problem();
  // The object an operand's pointer lies in, or null for inline bytes.
  auto object_of = [&](const void* ptr) -> FakeObject* {
    const auto at = reinterpret_cast<uintptr_t>(ptr);
    for (FakeObject& object : objects) {
      const auto begin = reinterpret_cast<uintptr_t>(object.data.get());
      if (at >= begin && at < begin + object.size) return &object;
    }
    return nullptr;
  };
  // Reads every element of A and B (ASan checks the bounds) and marks the
  // region bytes they cover.
  volatile char sink = 0;
  auto read_operand = [&](const InputMatrix& x, int64_t rows, int64_t cols) {
    const char* base = static_cast<const char*>(x.data);
    FakeObject* object = object_of(base);
    fuzz::ForEachElement(p.batch, rows, cols, x.strides, 2, [&](size_t at) {
      sink = sink + base[at] + base[at + 1];
      if (object != nullptr) {
        const size_t first = static_cast<size_t>(base - object->data.get());
        object->read[first + at] = true;
        object->read[first + at + 1] = true;
      }
    });
  };
  read_operand(p.a, p.m, p.k);
  read_operand(p.b, p.k, p.n);
  // Writes every element of C; one in a region must not touch an input.
  char* c = static_cast<char*>(p.c.data);
  FakeObject* c_object = object_of(c);
  const size_t esize = DTypeSize(p.c_dtype);
  fuzz::ForEachElement(p.batch, p.m, p.n, p.c.strides, esize, [&](size_t at) {
    for (size_t byte = 0; byte < esize; ++byte) {
      if (c_object != nullptr) {
        FUZZ_CHECK(!c_object->read[c - c_object->data.get() + at + byte]);
      }
      c[at + byte] = 1;
    }
  });
  FUZZ_CHECK(plan->output_in_region == (c_object != nullptr));
  return 0;
}
