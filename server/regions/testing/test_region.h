// A Region over plain host memory for unit tests: its size, placement,
// device and intactness are whatever the test sets, and it records when it
// is released.
#ifndef MATMUL_SERVER_REGIONS_TESTING_TEST_REGION_H_
#define MATMUL_SERVER_REGIONS_TESTING_TEST_REGION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/regions/region.h"

namespace matmul {

class TestRegion final : public Region {
 public:
  struct Options {
    int64_t size = 0;
    // Placement: regions with one `object` are views of the same memory.
    std::string object = "test";
    uint64_t offset = 0;
    int cuda_device = -1;
    // Set to true when the region is destroyed; may be null.
    std::shared_ptr<bool> released;
    // When set to false, CheckIntact fails; may be null (always intact).
    std::shared_ptr<bool> intact;
    // Whether host_data() and device_data() address the bytes.
    bool host_visible = true;
    bool device_visible = false;
  };

  explicit TestRegion(Options options)
      : options_(std::move(options)),
        bytes_(static_cast<size_t>(options_.size)) {}
  ~TestRegion() override {
    if (options_.released) *options_.released = true;
  }

  std::string kind() const override { return "test"; }
  int64_t size_bytes() const override { return options_.size; }
  void* host_data() const override {
    return options_.host_visible ? data() : nullptr;
  }
  void* device_data() const override {
    return options_.device_visible ? data() : nullptr;
  }
  Placement placement() const override {
    return {options_.object, options_.offset};
  }
  int cuda_device() const override { return options_.cuda_device; }
  absl::Status CheckIntact() const override {
    if (!options_.intact || *options_.intact) return absl::OkStatus();
    return absl::FailedPreconditionError("the test broke this region");
  }

  // The region's bytes.
  char* data() const { return const_cast<char*>(bytes_.data()); }

 private:
  const Options options_;
  std::vector<char> bytes_;
};

inline std::shared_ptr<TestRegion> MakeTestRegion(TestRegion::Options options) {
  return std::make_shared<TestRegion>(std::move(options));
}

}  // namespace matmul

#endif  // MATMUL_SERVER_REGIONS_TESTING_TEST_REGION_H_
