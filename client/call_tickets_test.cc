#include "client/call_tickets.h"

#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

TEST(CallTicketsTest, TicketsCountFromOneInIssueOrder) {
  CallTickets tickets;
  EXPECT_EQ(tickets.answered_through(), 1u);
  EXPECT_EQ(tickets.Issue(), 1u);
  EXPECT_EQ(tickets.Issue(), 2u);
  EXPECT_EQ(tickets.Issue(), 3u);
  EXPECT_EQ(tickets.answered_through(), 1u);
}

TEST(CallTicketsTest, AnsweredThroughWaitsForTheFirstUnanswered) {
  CallTickets tickets;
  for (int i = 0; i < 4; ++i) tickets.Issue();
  tickets.Answer(2, absl::OkStatus());
  tickets.Answer(3, absl::OkStatus());
  EXPECT_EQ(tickets.answered_through(), 1u);  // 1 is still out
  tickets.Answer(1, absl::OkStatus());
  EXPECT_EQ(tickets.answered_through(), 4u);  // 1..3 answered, 4 is not
  tickets.Answer(4, absl::OkStatus());
  EXPECT_EQ(tickets.answered_through(), 5u);
  // Later tickets continue the count.
  EXPECT_EQ(tickets.Issue(), 5u);
  EXPECT_EQ(tickets.answered_through(), 5u);
}

TEST(CallTicketsTest, FailuresComeBackOnceByTicketWithTheirTags) {
  CallTickets tickets;
  for (int i = 0; i < 5; ++i) tickets.Issue();
  EXPECT_FALSE(tickets.has_failures());
  tickets.Answer(4, absl::InvalidArgumentError("four"), 40);
  tickets.Answer(1, absl::OkStatus(), 10);
  tickets.Answer(2, absl::DeadlineExceededError("two"), 20);
  EXPECT_TRUE(tickets.has_failures());
  std::vector<CallTickets::Failure> failures = tickets.TakeFailures();
  ASSERT_EQ(failures.size(), 2u);
  EXPECT_EQ(failures[0].ticket, 2u);
  EXPECT_EQ(failures[0].tag, 20u);
  EXPECT_EQ(failures[0].status, absl::DeadlineExceededError("two"));
  EXPECT_EQ(failures[1].ticket, 4u);
  EXPECT_EQ(failures[1].tag, 40u);
  EXPECT_EQ(failures[1].status, absl::InvalidArgumentError("four"));
  EXPECT_FALSE(tickets.has_failures());
  EXPECT_TRUE(tickets.TakeFailures().empty());
  EXPECT_EQ(tickets.answered_through(), 3u);
}

TEST(CallTicketsTest, AnswersToUnknownOrAnsweredTicketsAreIgnored) {
  CallTickets tickets;
  tickets.Issue();
  tickets.Issue();
  tickets.Answer(7, absl::InternalError("never issued"));
  tickets.Answer(0, absl::InternalError("never issued"));
  tickets.Answer(2, absl::OkStatus());
  tickets.Answer(2, absl::InternalError("second answer"));
  EXPECT_FALSE(tickets.has_failures());
  EXPECT_EQ(tickets.answered_through(), 1u);
  tickets.Answer(1, absl::OkStatus());
  tickets.Answer(1, absl::InternalError("answered and gone"));
  EXPECT_FALSE(tickets.has_failures());
  EXPECT_EQ(tickets.answered_through(), 3u);
}

TEST(CallTicketsTest, WaitForAnswersWaitsForTheTicketsIssuedBeforeIt) {
  CallTickets tickets;
  EXPECT_TRUE(tickets.WaitForAnswers(absl::ZeroDuration()));  // none issued
  tickets.Issue();
  tickets.Issue();
  tickets.Answer(2, absl::OkStatus());
  EXPECT_FALSE(tickets.WaitForAnswers(absl::Milliseconds(20)));

  absl::Notification waiting;
  bool all_answered = false;
  std::thread waiter([&] {
    waiting.Notify();
    all_answered = tickets.WaitForAnswers(absl::Seconds(30));
  });
  waiting.WaitForNotification();
  absl::SleepFor(absl::Milliseconds(20));  // lets it start waiting
  // Issued after the wait began: not waited for.
  EXPECT_EQ(tickets.Issue(), 3u);
  tickets.Answer(1, absl::OkStatus());
  waiter.join();
  EXPECT_TRUE(all_answered);
  EXPECT_EQ(tickets.answered_through(), 3u);
  EXPECT_FALSE(tickets.WaitForAnswers(absl::Milliseconds(1)));
}

TEST(CallTicketsTest, ConcurrentIssueAndAnswerLoseNothing) {
  CallTickets tickets;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&tickets] {
      for (int i = 0; i < kPerThread; ++i) {
        const uint64_t ticket = tickets.Issue();
        tickets.Answer(ticket,
                       ticket % 100 == 0 ? absl::UnavailableError("every 100th")
                                         : absl::OkStatus(),
                       ticket);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(tickets.answered_through(), kThreads * kPerThread + 1u);
  std::vector<CallTickets::Failure> failures = tickets.TakeFailures();
  ASSERT_EQ(failures.size(), kThreads * kPerThread / 100u);
  for (size_t i = 0; i < failures.size(); ++i) {
    EXPECT_EQ(failures[i].ticket, 100 * (i + 1));
    EXPECT_EQ(failures[i].tag, failures[i].ticket);
  }
}

}  // namespace
}  // namespace matmul
