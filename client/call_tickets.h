// matmul::CallTickets: the bookkeeping of calls that are sent and never
// waited for one by one (stream-ordered products whose caller only learns
// of failures later). Each call takes a ticket, 1, 2, 3... in the order
// they are taken; its outcome is recorded against the ticket when it
// comes, in any order. The caller can then ask which tickets are all
// answered, wait for every ticket taken so far, and collect the failures.
//
//   const uint64_t ticket = tickets.Issue();
//   ring.CallAsync(..., [&tickets, ticket](absl::Status status) {
//     tickets.Answer(ticket, std::move(status));
//   });
//   ...
//   if (tickets.has_failures()) for (auto& f : tickets.TakeFailures()) ...
//
// Thread-safe. Answer never blocks for long: it may run on a completion
// thread.
#ifndef MATMUL_CLIENT_CALL_TICKETS_H_
#define MATMUL_CLIENT_CALL_TICKETS_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace matmul {

class CallTickets {
 public:
  struct Failure {
    uint64_t ticket = 0;
    // What the caller passed to Answer (the Python client's own number
    // for the product, which orders it among products sent other ways).
    uint64_t tag = 0;
    absl::Status status;
  };

  CallTickets() = default;
  CallTickets(const CallTickets&) = delete;
  CallTickets& operator=(const CallTickets&) = delete;

  // The next ticket: one more than the last one issued, from 1.
  uint64_t Issue();

  // Records the outcome of `ticket`, which must be issued and not answered
  // yet (a second answer is ignored). A non-OK `status` is kept, with
  // `tag`, until TakeFailures.
  void Answer(uint64_t ticket, absl::Status status, uint64_t tag = 0);

  // Every ticket below this one is answered (1 before any is).
  uint64_t answered_through() const {
    return answered_through_.load(std::memory_order_acquire);
  }

  // Whether TakeFailures has anything; no lock, for a caller that checks
  // on every call.
  bool has_failures() const {
    return failures_waiting_.load(std::memory_order_acquire) != 0;
  }

  // The failures recorded since the last call, by ticket.
  std::vector<Failure> TakeFailures();

  // Waits up to `timeout` until every ticket issued before the call is
  // answered; false when some still were not.
  bool WaitForAnswers(absl::Duration timeout);

 private:
  mutable absl::Mutex mu_;
  // answered_[i] says whether ticket answered_through_ + i is answered:
  // the window from the first unanswered ticket to the last issued one.
  std::deque<bool> answered_ ABSL_GUARDED_BY(mu_);
  std::vector<Failure> failures_ ABSL_GUARDED_BY(mu_);
  // Written under mu_; read without it.
  std::atomic<uint64_t> answered_through_{1};
  std::atomic<size_t> failures_waiting_{0};
};

}  // namespace matmul

#endif  // MATMUL_CLIENT_CALL_TICKETS_H_
