#include "common/gemm/launch_order.h"

#include <memory>
#include <utility>

#include "gtest/gtest.h"

namespace matmul {
namespace {

TEST(LaunchOrderTest, AProductWaitsForEveryEarlierOne) {
  LaunchOrder order;
  LaunchOrder::Ticket first = order.Take();
  LaunchOrder::Ticket second = order.Take();
  LaunchOrder::Ticket third = order.Take();
  EXPECT_TRUE(first.EarlierLaunched());
  EXPECT_FALSE(second.EarlierLaunched());
  EXPECT_FALSE(third.EarlierLaunched());
  // Launched out of order: the third still waits for the first.
  second.MarkLaunched();
  EXPECT_FALSE(third.EarlierLaunched());
  first.MarkLaunched();
  EXPECT_TRUE(third.EarlierLaunched());
}

TEST(LaunchOrderTest, ATicketDroppedUnmarkedHoldsNothingUp) {
  LaunchOrder order;
  auto refused = std::make_unique<LaunchOrder::Ticket>(order.Take());
  LaunchOrder::Ticket next = order.Take();
  EXPECT_FALSE(next.EarlierLaunched());
  refused.reset();
  EXPECT_TRUE(next.EarlierLaunched());
}

TEST(LaunchOrderTest, MovedTicketsKeepTheirPlace) {
  LaunchOrder order;
  LaunchOrder::Ticket first = order.Take();
  LaunchOrder::Ticket second = order.Take();
  LaunchOrder::Ticket moved = std::move(second);
  EXPECT_FALSE(moved.EarlierLaunched());
  first.MarkLaunched();
  first.MarkLaunched();  // idempotent
  EXPECT_TRUE(moved.EarlierLaunched());
}

TEST(LaunchOrderTest, AnEmptyTicketNeverCountsAsReady) {
  LaunchOrder::Ticket empty;
  EXPECT_FALSE(empty.EarlierLaunched());
  empty.MarkLaunched();
}

TEST(LaunchOrderTest, ATicketMayOutliveItsOrder) {
  auto order = std::make_unique<LaunchOrder>();
  LaunchOrder::Ticket ticket = order->Take();
  order.reset();
  EXPECT_TRUE(ticket.EarlierLaunched());
  ticket.MarkLaunched();
}

}  // namespace
}  // namespace matmul
