#include "client/stream_order/stream_order_numbers.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace matmul {
namespace {

absl::Status Queued() { return absl::OkStatus(); }

TEST(StreamOrderNumbersTest, NumbersFollowTheQueueingOrderFromOne) {
  StreamOrderNumbers numbers;
  absl::StatusOr<StreamOrderNumbers::Number> first = numbers.Take(Queued);
  absl::StatusOr<StreamOrderNumbers::Number> second = numbers.Take(Queued);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->number, 1u);
  EXPECT_EQ(second->number, 2u);
  // Nothing was unanswered before the first; the first still is.
  EXPECT_EQ(first->answered_below, 1u);
  EXPECT_EQ(second->answered_below, 1u);
}

TEST(StreamOrderNumbersTest, AnsweredBelowIsTheOldestUnanswered) {
  StreamOrderNumbers numbers;
  uint64_t taken[3];
  for (uint64_t& n : taken) n = numbers.Take(Queued)->number;
  numbers.Answered(taken[1]);  // answered out of order: 1 still holds
  EXPECT_EQ(numbers.Take(Queued)->answered_below, taken[0]);
  numbers.Answered(taken[0]);
  EXPECT_EQ(numbers.Take(Queued)->answered_below, taken[2]);
}

TEST(StreamOrderNumbersTest, AFailedQueueTakesNoNumber) {
  StreamOrderNumbers numbers;
  absl::StatusOr<StreamOrderNumbers::Number> failed = numbers.Take(
      [] { return absl::FailedPreconditionError("stream write failed"); });
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<StreamOrderNumbers::Number> next = numbers.Take(Queued);
  EXPECT_EQ(next->number, 1u);
  EXPECT_EQ(next->answered_below, 1u);
}

TEST(StreamOrderNumbersTest, QueueingAndNumberingHappenTogether) {
  // Each thread's queue callback appends to one log; the numbers must come
  // out in the log's order, which only holds if both run under one lock.
  StreamOrderNumbers numbers;
  std::vector<uint64_t> log;  // written only inside queue callbacks
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        uint64_t position = 0;
        absl::StatusOr<StreamOrderNumbers::Number> n = numbers.Take([&] {
          position = log.size() + 1;
          log.push_back(position);
          return absl::OkStatus();
        });
        ASSERT_TRUE(n.ok());
        EXPECT_EQ(n->number, position);
        numbers.Answered(n->number);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(log.size(), 2000u);
}

TEST(StreamOrderNumbersTest, OneNumberingPerProcess) {
  EXPECT_EQ(&StreamOrderNumbers::OfThisProcess(),
            &StreamOrderNumbers::OfThisProcess());
}

}  // namespace
}  // namespace matmul
