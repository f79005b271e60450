// Writes the seed corpus of the fuzz targets: a few valid inputs of each
// kind (so the fuzzers start past the parsers) and a few near misses.
// Usage: make_fuzz_corpus <corpus dir>; writes <dir>/<fuzzer>/<seed>.
// Deterministic: the same program writes the same files.
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/request_ring_layout.h"
#include "matmul/v1/matmul.pb.h"

namespace matmul {
namespace {

std::mt19937 random_bits(20261201);

// Random finite BF16 values in [-2, 2) (the upper halves of FP32 values).
std::string RandomBf16(int64_t elements) {
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  std::string bytes(static_cast<size_t>(elements) * 2, '\0');
  for (int64_t i = 0; i < elements; ++i) {
    const float f = value(random_bits);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    const uint16_t upper = static_cast<uint16_t>(bits >> 16);
    std::memcpy(&bytes[static_cast<size_t>(i) * 2], &upper, 2);
  }
  return bytes;
}

v1::Tensor Inline(std::vector<int64_t> shape, std::vector<int64_t> strides = {},
                  int64_t elements = -1) {
  v1::Tensor tensor;
  tensor.set_dtype(v1::DTYPE_BF16);
  int64_t dense = 1;
  for (int64_t d : shape) {
    tensor.add_shape(d);
    dense *= d;
  }
  for (int64_t s : strides) tensor.add_strides(s);
  tensor.set_inline_data(RandomBf16(elements < 0 ? dense : elements));
  return tensor;
}

v1::Tensor InRegion(std::vector<int64_t> shape, char region, uint64_t offset,
                    v1::DType dtype = v1::DTYPE_BF16) {
  v1::Tensor tensor;
  tensor.set_dtype(dtype);
  for (int64_t d : shape) tensor.add_shape(d);
  tensor.mutable_region()->set_region_id(std::string(1, region));
  tensor.mutable_region()->set_offset_bytes(offset);
  return tensor;
}

// Products with inline operands: every layout and option once.
std::vector<std::pair<std::string, v1::MatmulRequest>> InlineRequests() {
  std::vector<std::pair<std::string, v1::MatmulRequest>> out;
  v1::MatmulRequest r;
  r.set_request_id(1);
  *r.mutable_a() = Inline({4, 8});
  *r.mutable_b() = Inline({8, 3});
  out.emplace_back("nn", r);

  r.set_transpose_a(true);
  *r.mutable_a() = Inline({8, 4});
  out.emplace_back("tn", r);
  r.set_transpose_b(true);
  *r.mutable_b() = Inline({3, 8});
  out.emplace_back("tt", r);
  r.set_transpose_a(false);
  *r.mutable_a() = Inline({4, 8});
  out.emplace_back("nt", r);

  v1::MatmulRequest batched;
  batched.set_request_id(2);
  *batched.mutable_a() = Inline({3, 2, 5});
  *batched.mutable_b() = Inline({5, 6});  // broadcast over the batch
  batched.set_out_dtype(v1::DTYPE_FP32);
  out.emplace_back("batched_broadcast_fp32", batched);

  v1::MatmulRequest strided;
  strided.set_request_id(3);
  // Rows 16 elements apart; 3 rows of 5 reach element 2 * 16 + 4.
  *strided.mutable_a() = Inline({3, 5}, {16, 1}, 2 * 16 + 5);
  *strided.mutable_b() = Inline({2, 5, 4}, {0, 4, 1}, 20);
  out.emplace_back("strided_batch_stride0", strided);

  v1::MatmulRequest with_c;
  with_c.set_request_id(4);
  *with_c.mutable_a() = Inline({2, 3});
  *with_c.mutable_b() = Inline({3, 2});
  *with_c.mutable_c() = Inline({2, 2});
  with_c.set_alpha(0.5f);
  with_c.set_beta(2.0f);
  out.emplace_back("alpha_beta_c", with_c);

  v1::MatmulRequest bad = r;
  bad.mutable_a()->add_shape(2);
  bad.mutable_a()->add_shape(2);  // rank 4
  out.emplace_back("bad_rank", bad);
  bad = r;
  bad.mutable_b()->add_strides(-1);
  bad.mutable_b()->add_strides(1);
  out.emplace_back("bad_negative_stride", bad);
  bad = r;
  bad.mutable_a()->mutable_inline_data()->pop_back();
  out.emplace_back("bad_short_data", bad);
  return out;
}

// Products on regions (region_bounds_fuzzer's fake regions 0..3).
std::vector<std::pair<std::string, v1::MatmulRequest>> RegionRequests() {
  std::vector<std::pair<std::string, v1::MatmulRequest>> out;
  v1::MatmulRequest r;
  *r.mutable_a() = InRegion({4, 8}, 0, 0);
  *r.mutable_b() = InRegion({8, 4}, 2, 64);
  *r.mutable_c() = InRegion({4, 4}, 1, 256, v1::DTYPE_FP32);
  out.emplace_back("abc_in_regions", r);
  // B stored column-major as [4, 8] and transposed: op(B) is [8, 4].
  r.set_transpose_b(true);
  *r.mutable_b() = InRegion({4, 8}, 2, 64);
  r.mutable_b()->add_strides(1);
  r.mutable_b()->add_strides(4);
  out.emplace_back("transposed_strided_b_in_region", r);
  v1::MatmulRequest mixed;
  *mixed.mutable_a() = Inline({2, 3, 4});
  *mixed.mutable_b() = InRegion({2, 4, 5}, 3, 2);
  out.emplace_back("inline_a_region_b", mixed);
  v1::MatmulRequest aliased = r;
  *aliased.mutable_c() = InRegion({4, 4}, 0, 16, v1::DTYPE_FP32);
  out.emplace_back("c_aliases_a", aliased);
  return out;
}

// A ring of `slots` slots of `slot_bytes` with `request` submitted in
// slot 1 (and a stray entry naming a slot out of range).
std::string RingImage(uint32_t slots, uint32_t slot_bytes,
                      const std::string& request, bool notify) {
  std::string image(ring::RingBytes(slots, slot_bytes), '\0');
  char* base = image.data();
  const uint32_t header[4] = {ring::kMagic, ring::kVersion, slots, slot_bytes};
  std::memcpy(base, header, sizeof(header));
  uint64_t tail = 2;
  std::memcpy(base + offsetof(ring::RingHeader, submit_tail), &tail, 8);
  auto put_entry = [&](uint32_t position, uint32_t slot) {
    char* entry =
        base + ring::SubmitQueueOffset() + position * sizeof(ring::QueueEntry);
    const uint64_t sequence = position + 1;
    std::memcpy(entry, &sequence, 8);
    std::memcpy(entry + offsetof(ring::QueueEntry, slot), &slot, 4);
  };
  put_entry(0, 1);
  put_entry(1, slots + 3);
  char* slot = base + ring::SlotsOffset(slots) + slot_bytes;
  const uint32_t state = ring::kSubmitted;
  const uint32_t bytes = static_cast<uint32_t>(request.size());
  const uint32_t notify_word = notify ? 1 : 0;
  const int64_t timeout_ns = 1000000;
  std::memcpy(slot + offsetof(ring::SlotHeader, state), &state, 4);
  std::memcpy(slot + offsetof(ring::SlotHeader, request_bytes), &bytes, 4);
  std::memcpy(slot + offsetof(ring::SlotHeader, notify), &notify_word, 4);
  std::memcpy(slot + offsetof(ring::SlotHeader, timeout_ns), &timeout_ns, 8);
  std::memcpy(slot + sizeof(ring::SlotHeader), request.data(),
              std::min<size_t>(request.size(), slot_bytes - 64));
  return image;
}

void Write(const std::string& dir, const std::string& fuzzer,
           const std::string& name, const std::string& bytes) {
  const std::string folder = absl::StrCat(dir, "/", fuzzer);
  mkdir(folder.c_str(), 0755);
  std::ofstream(absl::StrCat(folder, "/", name), std::ios::binary) << bytes;
}

}  // namespace
}  // namespace matmul

int main(int argc, char** argv) {
  using namespace matmul;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  mkdir(dir.c_str(), 0755);
  for (const auto& [name, request] : InlineRequests()) {
    Write(dir, "request_validation_fuzzer", name, request.SerializeAsString());
    Write(dir, "matmul_service_fuzzer", name, request.SerializeAsString());
  }
  // Region sizes: [offset 16 bits][size 16 bits] per region, little endian.
  std::string regions;
  for (uint32_t word : {0x10000000u, 0x08000000u, 0x10000040u, 0x04000010u}) {
    regions.append(reinterpret_cast<const char*>(&word), 4);
  }
  for (const auto& [name, request] : RegionRequests()) {
    Write(dir, "request_validation_fuzzer", name, request.SerializeAsString());
    Write(dir, "region_bounds_fuzzer", name,
          regions + request.SerializeAsString());
  }
  // Ring inputs: [slots - 1][(slot_bytes - 512) / 64][flags][shortfall].
  const std::string request =
      InlineRequests().front().second.SerializeAsString();
  const std::pair<uint32_t, uint32_t> shapes[] = {{4, 1024}, {2, 512}};
  for (const auto& [slots, slot_bytes] : shapes) {
    for (bool notify : {false, true}) {
      const std::string prefix = {static_cast<char>(slots - 1),
                                  static_cast<char>((slot_bytes - 512) / 64), 0,
                                  0};
      Write(dir, "ring_slot_fuzzer",
            absl::StrCat(slots, "x", slot_bytes, notify ? "_notify" : ""),
            prefix + RingImage(slots, slot_bytes, request, notify));
    }
  }
  Write(dir, "ring_slot_fuzzer", "short_object",
        std::string{3, 8, 3, 100} + RingImage(4, 1024, request, false));
  // The metrics endpoint's parser.
  const char* heads[][2] = {
      {"get_metrics", "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n"},
      {"get_http10", "GET / HTTP/1.0\r\n\r\n"},
      {"headers",
       "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n"
       "User-Agent: Prometheus/2.45\r\nConnection: close\r\n\r\n"},
      {"bare_lf", "GET /metrics HTTP/1.1\nHost: a\n\n"},
      {"post", "POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\n"},
      {"garbage", "\x01\x02 / HTTP/9\r\n\r\n"},
  };
  for (const auto& [name, head] : heads) {
    Write(dir, "http_request_head_fuzzer", name, head);
  }
  return 0;
}
