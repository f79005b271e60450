#include "kernels/gemm_batch.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace matmul {
namespace {

// A row-major [batch, m, k] x [batch, k, n] problem over fake addresses
// (never dereferenced): only the arithmetic is under test.
GemmProblem Problem(int64_t batch, uintptr_t base) {
  GemmProblem p;
  p.batch = batch;
  p.m = 4;
  p.n = 6;
  p.k = 8;
  p.a.data = reinterpret_cast<const void*>(base);
  p.a.strides = {32, 8, 1};
  p.b.data = reinterpret_cast<const void*>(base + 0x10000);
  p.b.strides = {48, 6, 1};
  p.c.data = reinterpret_cast<void*>(base + 0x20000);
  p.c.strides = {24, 6, 1};
  return p;
}

TEST(BatchKeyTest, EqualOnlyWhenALaunchCanBeShared) {
  const GemmProblem p = Problem(1, 0x1000000);
  GemmProblem other = Problem(3, 0x2000000);  // batch and pointers differ
  EXPECT_EQ(BatchKey(p), BatchKey(other));
  other.k = 9;
  EXPECT_NE(BatchKey(p), BatchKey(other));
  other = p;
  other.b.strides = {48, 1, 8};  // transposed B
  EXPECT_NE(BatchKey(p), BatchKey(other));
  other = p;
  other.c_dtype = DType::kFP32;
  EXPECT_NE(BatchKey(p), BatchKey(other));
  other = p;
  other.beta = 0.5f;
  EXPECT_NE(BatchKey(p), BatchKey(other));
  other = p;
  other.alpha = 2.0f;
  EXPECT_NE(BatchKey(p), BatchKey(other));
}

TEST(CombinedProblemTest, EveryEntryOfEveryPartInOrder) {
  GemmProblem first = Problem(1, 0x1000000);
  GemmProblem second = Problem(3, 0x2000000);
  second.a.strides.batch = 0;  // broadcast A: the same pointer three times
  second.c_dtype = first.c_dtype;
  const GemmProblem* parts[] = {&first, &second};
  absl::StatusOr<CombinedProblem> combined = CombinedProblem::Combine(parts);
  ASSERT_TRUE(combined.ok()) << combined.status();
  const GemmProblem& p = combined->problem();
  EXPECT_EQ(p.batch, 4);
  EXPECT_EQ(p.m, 4);
  EXPECT_EQ(p.a.strides.row, 8);
  ASSERT_NE(p.a.pointers, nullptr);
  ASSERT_NE(p.b.pointers, nullptr);
  ASSERT_NE(p.c.pointers, nullptr);
  auto at = [](const void* pointer) {
    return reinterpret_cast<uintptr_t>(pointer);
  };
  EXPECT_EQ(at(p.a.pointers[0]), 0x1000000u);
  EXPECT_EQ(at(p.a.pointers[1]), 0x2000000u);
  EXPECT_EQ(at(p.a.pointers[3]), 0x2000000u);
  EXPECT_EQ(at(p.b.pointers[2]), 0x2010000u + 48 * 2);      // BF16
  EXPECT_EQ(at(p.c.pointers[3]), 0x2020000u + 24 * 2 * 2);  // BF16 C
  EXPECT_EQ(p.a.pointer_alignment, 16);
  // The problem survives a move (it points into the owned arrays).
  CombinedProblem moved = *std::move(combined);
  EXPECT_EQ(at(moved.problem().b.pointers[1]), 0x2010000u);
}

TEST(CombinedProblemTest, PointerArrayPartsAndFp32Output) {
  GemmProblem p = Problem(2, 0x1000000);
  p.c_dtype = DType::kFP32;
  std::vector<const void*> a = {reinterpret_cast<const void*>(0xA0),
                                reinterpret_cast<const void*>(0xB0)};
  p.a.pointers = a.data();
  const GemmProblem* parts[] = {&p, &p};
  absl::StatusOr<CombinedProblem> combined = CombinedProblem::Combine(parts);
  ASSERT_TRUE(combined.ok()) << combined.status();
  EXPECT_EQ(combined->problem().batch, 4);
  EXPECT_EQ(combined->a_pointers()[3], a[1]);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(combined->c_pointers()[1]),
            0x1020000u + 24 * 4);
}

TEST(CommonAlignmentTest, LargestPowerOfTwoUpTo16) {
  auto at = [](uintptr_t address) {
    return reinterpret_cast<const void*>(address);
  };
  const void* aligned[] = {at(0x1000), at(0x2040)};
  EXPECT_EQ(CommonAlignment(aligned), 16);
  const void* mixed[] = {at(0x1000), at(0x1024), at(0x1008)};
  EXPECT_EQ(CommonAlignment(mixed), 4);
  const void* odd[] = {at(0x1000), at(0x1001)};
  EXPECT_EQ(CommonAlignment(odd), 1);
}

TEST(CombinedProblemTest, RefusesEmptyAndMismatchedParts) {
  EXPECT_EQ(CombinedProblem::Combine({}).status().code(),
            absl::StatusCode::kInvalidArgument);
  GemmProblem p = Problem(1, 0x1000000);
  GemmProblem q = Problem(1, 0x2000000);
  q.n = 7;
  const GemmProblem* parts[] = {&p, &q};
  absl::Status status = CombinedProblem::Combine(parts).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("cannot share a launch"), std::string::npos);
}

}  // namespace
}  // namespace matmul
