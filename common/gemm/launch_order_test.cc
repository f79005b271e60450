#include "common/gemm/launch_order.h"

#include <memory>
#include <utility>

#include "gtest/gtest.h"

namespace matmul {
namespace {

constexpr absl::Duration kLongLapse = absl::Hours(1);

LaunchOrder::Ticket Take(LaunchOrder& order, uint64_t number,
                         uint64_t answered_below) {
  absl::StatusOr<LaunchOrder::Ticket> ticket =
      order.Take(number, answered_below);
  EXPECT_TRUE(ticket.ok()) << ticket.status();
  return ticket.ok() ? *std::move(ticket) : LaunchOrder::Ticket();
}

TEST(LaunchOrderTest, AProductWaitsForEveryEarlierNumber) {
  LaunchOrder order(kLongLapse);
  LaunchOrder::Ticket first = Take(order, 1, 1);
  LaunchOrder::Ticket second = Take(order, 2, 1);
  LaunchOrder::Ticket third = Take(order, 3, 1);
  EXPECT_TRUE(first.EarlierLaunched());
  EXPECT_FALSE(second.EarlierLaunched());
  EXPECT_FALSE(third.EarlierLaunched());
  // Launched out of order: the third still waits for the first.
  second.MarkLaunched();
  EXPECT_FALSE(third.EarlierLaunched());
  first.MarkLaunched();
  EXPECT_TRUE(third.EarlierLaunched());
}

TEST(LaunchOrderTest, TheNumbersDecideNotTheOrderOfArrival) {
  // Two rings delivered the process's products 2 and 3 before 1.
  LaunchOrder order(kLongLapse);
  LaunchOrder::Ticket third = Take(order, 3, 1);
  LaunchOrder::Ticket second = Take(order, 2, 1);
  EXPECT_FALSE(third.EarlierLaunched());
  EXPECT_FALSE(second.EarlierLaunched());  // 1 has not arrived
  LaunchOrder::Ticket first = Take(order, 1, 1);
  EXPECT_TRUE(first.EarlierLaunched());
  first.MarkLaunched();
  EXPECT_TRUE(second.EarlierLaunched());
  EXPECT_FALSE(third.EarlierLaunched());
  second.MarkLaunched();
  EXPECT_TRUE(third.EarlierLaunched());
}

TEST(LaunchOrderTest, NumbersTheClientCallsAnsweredAreNotWaitedFor) {
  LaunchOrder order(kLongLapse);
  // 1..4 are answered (by the client's account); 5 waits for nothing.
  LaunchOrder::Ticket fifth = Take(order, 5, 5);
  EXPECT_TRUE(fifth.EarlierLaunched());
  // 6 was taken while 5 was unanswered.
  LaunchOrder::Ticket sixth = Take(order, 6, 5);
  EXPECT_FALSE(sixth.EarlierLaunched());
  fifth.MarkLaunched();
  EXPECT_TRUE(sixth.EarlierLaunched());
}

TEST(LaunchOrderTest, ALateNumberBelowAnsweredBelowWaitsOnTheCpu) {
  LaunchOrder order(kLongLapse);
  LaunchOrder::Ticket later = Take(order, 8, 8);
  // 7 comes after the client stopped waiting for it: it holds nothing up
  // and never waits on the GPU.
  LaunchOrder::Ticket stale = Take(order, 7, 7);
  EXPECT_FALSE(stale.EarlierLaunched());
  EXPECT_TRUE(later.EarlierLaunched());
}

TEST(LaunchOrderTest, AMissingNumberLapsesAndIsRefusedAfter) {
  LaunchOrder order(absl::Milliseconds(20));
  LaunchOrder::Ticket third = Take(order, 3, 1);
  LaunchOrder::Ticket first = Take(order, 1, 1);
  first.MarkLaunched();
  EXPECT_FALSE(third.EarlierLaunched());  // 2 is missing: its lapse starts
  absl::SleepFor(absl::Milliseconds(40));
  EXPECT_TRUE(third.EarlierLaunched());  // 2 lapsed
  absl::StatusOr<LaunchOrder::Ticket> late = order.Take(2, 1);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(late.status().message().find("--stream_order_lapse"),
            std::string::npos);
}

TEST(LaunchOrderTest, AWaitingNumberNeverLapses) {
  LaunchOrder order(absl::Milliseconds(1));
  LaunchOrder::Ticket first = Take(order, 1, 1);  // arrived, not launched
  LaunchOrder::Ticket second = Take(order, 2, 1);
  EXPECT_FALSE(second.EarlierLaunched());
  absl::SleepFor(absl::Milliseconds(10));
  EXPECT_FALSE(second.EarlierLaunched());
}

TEST(LaunchOrderTest, ATicketDroppedUnmarkedHoldsNothingUp) {
  LaunchOrder order(kLongLapse);
  auto refused = std::make_unique<LaunchOrder::Ticket>(Take(order, 1, 1));
  LaunchOrder::Ticket next = Take(order, 2, 1);
  EXPECT_FALSE(next.EarlierLaunched());
  refused.reset();
  EXPECT_TRUE(next.EarlierLaunched());
}

TEST(LaunchOrderTest, MovedTicketsKeepTheirPlace) {
  LaunchOrder order(kLongLapse);
  LaunchOrder::Ticket first = Take(order, 1, 1);
  LaunchOrder::Ticket second = Take(order, 2, 1);
  LaunchOrder::Ticket moved = std::move(second);
  EXPECT_FALSE(moved.EarlierLaunched());
  first.MarkLaunched();
  first.MarkLaunched();  // idempotent
  EXPECT_TRUE(moved.EarlierLaunched());
}

TEST(LaunchOrderTest, UnnumberedProductsGetAnEmptyTicket) {
  LaunchOrder order(kLongLapse);
  LaunchOrder::Ticket unnumbered = Take(order, 0, 0);
  EXPECT_FALSE(unnumbered.EarlierLaunched());
  unnumbered.MarkLaunched();
  LaunchOrder::Ticket empty;
  EXPECT_FALSE(empty.EarlierLaunched());
  empty.MarkLaunched();
}

TEST(LaunchOrderTest, BadNumbersAreRefused) {
  LaunchOrder order(kLongLapse);
  EXPECT_EQ(order.Take(3, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(order.Take(LaunchOrder::kMaxSpan + 2, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  LaunchOrder::Ticket first = Take(order, 1, 1);
  EXPECT_EQ(order.Take(1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);  // twice
}

TEST(LaunchOrderTest, ATicketMayOutliveItsOrder) {
  auto order = std::make_unique<LaunchOrder>(kLongLapse);
  LaunchOrder::Ticket ticket = Take(*order, 1, 1);
  order.reset();
  EXPECT_TRUE(ticket.EarlierLaunched());
  ticket.MarkLaunched();
}

}  // namespace
}  // namespace matmul
