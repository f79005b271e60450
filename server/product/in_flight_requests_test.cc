#include "server/product/in_flight_requests.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The answers a request got, in order.
struct Answers {
  std::vector<absl::Status> statuses;
  absl::AnyInvocable<void(absl::Status) &&> Done() {
    return [this](absl::Status status) { statuses.push_back(status); };
  }
};

TEST(InFlightRequestsTest, ListsEachRequestUntilItIsAnswered) {
  InFlightRequests table;
  Answers first, second;
  std::mt19937_64 rng(std::random_device{}());
  const std::string origin = "ring slot " + std::to_string(rng() % 64);
  auto a = table.Add(origin, "8x16x32", absl::Now(), first.Done());
  auto b =
      table.Add("unary call from unix:", "4x4x4", absl::Now(), second.Done());
  EXPECT_EQ(table.size(), 2);
  b->SetStage(InFlightRequest::Stage::kRunning);
  std::string page = table.Render();
  EXPECT_THAT(page, HasSubstr("2 requests in flight"));
  EXPECT_THAT(page, HasSubstr("queued"));
  EXPECT_THAT(page, HasSubstr("running"));
  EXPECT_THAT(page, HasSubstr("shape=8x16x32 from " + origin));
  // Oldest first.
  EXPECT_LT(page.find("8x16x32"), page.find("4x4x4"));

  a->Answer(absl::OkStatus());
  ASSERT_EQ(first.statuses.size(), 1u);
  EXPECT_TRUE(first.statuses[0].ok());
  EXPECT_EQ(table.size(), 1);
  EXPECT_THAT(table.Render(), Not(HasSubstr("8x16x32")));
  // A second answer is not given.
  a->Answer(absl::InternalError("twice"));
  EXPECT_EQ(first.statuses.size(), 1u);
}

TEST(InFlightRequestsTest, GivingUpAnswersOpenRequestsOnceAndSkipsClaimed) {
  InFlightRequests table;
  Answers open, claimed;
  auto waiting = table.Add("stream", "2x2x2", absl::Now(), open.Done());
  auto writing = table.Add("stream", "3x3x3", absl::Now(), claimed.Done());
  ASSERT_TRUE(writing->ClaimForWriting());
  EXPECT_TRUE(writing->claimed());
  EXPECT_FALSE(waiting->claimed());

  const std::string given_up =
      table.GiveUpAll(absl::UnavailableError("stopping"));
  EXPECT_THAT(given_up, HasSubstr("2x2x2"));
  EXPECT_THAT(given_up, Not(HasSubstr("3x3x3")));
  ASSERT_EQ(open.statuses.size(), 1u);
  EXPECT_EQ(open.statuses[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(claimed.statuses.empty());

  // The worker that ran the given-up request finds it answered.
  EXPECT_TRUE(waiting->claimed());
  EXPECT_FALSE(waiting->ClaimForWriting());
  waiting->Answer(absl::OkStatus());
  EXPECT_EQ(open.statuses.size(), 1u);
  // The worker that claimed first answers as usual.
  writing->Answer(absl::OkStatus());
  ASSERT_EQ(claimed.statuses.size(), 1u);
  EXPECT_TRUE(claimed.statuses[0].ok());
  EXPECT_EQ(table.size(), 0);

  // A request that arrives after the drain's end is answered at once.
  Answers late;
  EXPECT_EQ(table.Add("stream", "4x4x4", absl::Now(), late.Done()), nullptr);
  ASSERT_EQ(late.statuses.size(), 1u);
  EXPECT_EQ(late.statuses[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(late.statuses[0].message(), "stopping");
  EXPECT_EQ(table.size(), 0);
}

TEST(InFlightRequestsTest, ARequestDroppedUnansweredLeavesTheTable) {
  InFlightRequests table;
  Answers answers;
  auto request = table.Add("ring", "1x1x1", absl::Now(), answers.Done());
  EXPECT_EQ(table.size(), 1);
  request.reset();
  EXPECT_EQ(table.size(), 0);
  EXPECT_THAT(table.Render(), HasSubstr("0 requests in flight"));
}

}  // namespace
}  // namespace matmul
