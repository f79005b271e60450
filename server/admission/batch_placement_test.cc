// PlaceInBatches: which products may share a launch. Stream-ordered
// products that signal their clients' streams queue apart (which of them
// launch together, the runner decides: matmul_runner_test).
#include <atomic>
#include <cstdint>
#include <memory>

#include "common/gemm/gemm_problem.h"
#include "common/gemm/stream_order.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "server/admission/product_admission.h"

namespace matmul {
namespace {

GemmProblem Product(int64_t m, const StreamOrder* order) {
  GemmProblem p;
  p.m = m;
  p.n = 64;
  p.k = 32;
  p.a.strides = {0, p.k, 1};
  p.b.strides = {0, 1, p.k};
  p.c.strides = {0, p.n, 1};
  p.stream_order = order;
  return p;
}

TEST(BatchPlacementTest, OrderedProductsQueueApartByShapeAndResidency) {
  std::unique_ptr<GemmBackend> backend = CpuBackend::Create(1);
  std::atomic<uint32_t> word_a{5}, word_b{1};
  StreamOrder ready, waiting;
  ready.wait_host = &word_a;
  ready.wait_value = 5;  // reached
  waiting.wait_host = &word_b;
  waiting.wait_value = 2;  // not yet

  const BatchPlacement plain =
      PlaceInBatches(Product(16, nullptr), true, *backend, false);
  const BatchPlacement a =
      PlaceInBatches(Product(16, &ready), true, *backend, true);
  const BatchPlacement b =
      PlaceInBatches(Product(16, &waiting), true, *backend, true);
  EXPECT_EQ(plain.max_batch, 0);
  EXPECT_EQ(a.max_batch, 0);  // the batcher's bound
  EXPECT_NE(a.key, plain.key);
  // Whether the stream is there yet does not matter here.
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(b.max_batch, 0);
  // Another shape, or staged operands, queue apart.
  EXPECT_NE(PlaceInBatches(Product(32, &ready), true, *backend, true).key,
            a.key);
  EXPECT_NE(PlaceInBatches(Product(16, &ready), false, *backend, true).key,
            a.key);
}

}  // namespace
}  // namespace matmul
