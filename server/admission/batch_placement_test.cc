// PlaceInBatches: which products may share a launch. A stream-ordered
// product that signals its client's stream shares one only once that
// stream has reached it (then it waits for nothing still queued).
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

TEST(BatchPlacementTest,
     OrderedProductsShareALaunchOnlyOnceTheirStreamIsThere) {
  std::unique_ptr<GemmBackend> backend = CpuBackend::Create(1);
  std::atomic<uint32_t> word_a{5}, word_b{9}, word_c{1};
  StreamOrder ready_a, ready_b, waiting;
  ready_a.wait_host = &word_a;
  ready_a.wait_value = 5;  // reached
  ready_b.wait_host = &word_b;
  ready_b.wait_value = 7;  // passed
  waiting.wait_host = &word_c;
  waiting.wait_value = 2;  // not yet

  const BatchPlacement plain =
      PlaceInBatches(Product(16, nullptr), true, *backend, false);
  const BatchPlacement a =
      PlaceInBatches(Product(16, &ready_a), true, *backend, true);
  const BatchPlacement b =
      PlaceInBatches(Product(16, &ready_b), true, *backend, true);
  const BatchPlacement c =
      PlaceInBatches(Product(16, &waiting), true, *backend, true);
  EXPECT_EQ(plain.max_batch, 0);
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.max_batch, 0);  // the batcher's bound
  EXPECT_NE(a.key, plain.key);
  EXPECT_NE(c.key, a.key);
  EXPECT_EQ(c.max_batch, 1);

  // Once its client's stream gets there, a later product like it batches.
  word_c.store(2);
  EXPECT_EQ(PlaceInBatches(Product(16, &waiting), true, *backend, true).key,
            a.key);
  // Another shape, or staged operands, queue apart.
  EXPECT_NE(PlaceInBatches(Product(32, &ready_a), true, *backend, true).key,
            a.key);
  EXPECT_NE(PlaceInBatches(Product(16, &ready_a), false, *backend, true).key,
            a.key);
}

}  // namespace
}  // namespace matmul
