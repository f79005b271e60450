#include "kernels/cuda/selector/internal/finalist_pick.h"

#include <vector>

#include "gtest/gtest.h"

namespace matmul::cuda {
namespace {

constexpr double kMargin = 0.02;

TEST(PickFinalist, TheFastestWinsWhereItIsCublasLt) {
  const std::vector<FinalistTime> finalists = {
      {.cublaslt = false, .median_seconds = 2.0e-4},
      {.cublaslt = true, .median_seconds = 1.0e-4},
      {.cublaslt = false, .median_seconds = 1.5e-4}};
  EXPECT_EQ(PickFinalist(finalists, kMargin), 1u);
}

TEST(PickFinalist, AnOwnKernelWinsByMoreThanTheMargin) {
  const std::vector<FinalistTime> finalists = {
      {.cublaslt = true, .median_seconds = 1.05e-4},
      {.cublaslt = false, .median_seconds = 1.0e-4},
      {.cublaslt = false, .median_seconds = 1.01e-4}};
  EXPECT_EQ(PickFinalist(finalists, kMargin), 1u);
}

TEST(PickFinalist, CublasLtIsKeptOnATie) {
  // The own kernel is 1% faster: within the margin.
  const std::vector<FinalistTime> finalists = {
      {.cublaslt = false, .median_seconds = 1.0e-4},
      {.cublaslt = true, .median_seconds = 1.01e-4}};
  EXPECT_EQ(PickFinalist(finalists, kMargin), 1u);
  // Without a margin the faster one wins.
  EXPECT_EQ(PickFinalist(finalists, 0.0), 0u);
}

TEST(PickFinalist, WithoutCublasLtTheFastestOwnKernelWins) {
  const std::vector<FinalistTime> finalists = {
      {.cublaslt = false, .median_seconds = 1.01e-4},
      {.cublaslt = false, .median_seconds = 1.0e-4}};
  EXPECT_EQ(PickFinalist(finalists, kMargin), 1u);
}

TEST(PickFinalist, OneFinalist) {
  const std::vector<FinalistTime> finalists = {
      {.cublaslt = false, .median_seconds = 1.0e-4}};
  EXPECT_EQ(PickFinalist(finalists, kMargin), 0u);
}

}  // namespace
}  // namespace matmul::cuda
