// Every request queued or running: where it came from, the stage it
// reached, and the one answer it gets. The table is what /debug/requests
// shows (a request left in flight says where it stopped), and what a drain
// past its grace gives up on (MatmulServer::Shutdown).
//
// A request is answered exactly once, by whoever claims it first: the
// worker that ran it (which claims it before writing its response, see
// ClaimForWriting) or the drain giving up on it (GiveUpAll). The loser does
// nothing, so the response is never written after the call has gone.
#ifndef MATMUL_SERVER_PRODUCT_IN_FLIGHT_REQUESTS_H_
#define MATMUL_SERVER_PRODUCT_IN_FLIGHT_REQUESTS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace matmul {

class InFlightRequests;

class InFlightRequest {
 public:
  enum class Stage { kQueued, kRunning, kAnswering };

  // Only InFlightRequests::Add makes one.
  InFlightRequest(InFlightRequests& table, uint64_t id, std::string origin,
                  std::string shape, absl::Time accepted,
                  absl::AnyInvocable<void(absl::Status) &&> done);
  ~InFlightRequest();

  InFlightRequest(const InFlightRequest&) = delete;
  InFlightRequest& operator=(const InFlightRequest&) = delete;

  uint64_t id() const { return id_; }
  void SetStage(Stage stage);

  // The right to write the response and then Answer: true for the first
  // caller only, false once the request was given up on.
  bool ClaimForWriting();
  // True once someone claimed the answer: a worker still waiting for the
  // request's operands (a client's stream) learns that it was given up.
  bool claimed() const { return state_.load() != kOpen; }
  // Answers with `status` and leaves the table: after ClaimForWriting by
  // the same caller, or unclaimed (then it claims first). Does nothing when
  // someone else claimed the request.
  void Answer(absl::Status status);

  // One line for /debug/requests.
  std::string Describe(absl::Time now) const;

 private:
  friend class InFlightRequests;
  enum State : int { kOpen, kClaimed, kAnswered };

  // Claims and answers an open request; false when it was claimed already.
  bool GiveUp(absl::Status status);
  void Finish(absl::Status status);

  InFlightRequests& table_;
  const uint64_t id_;
  const std::string origin_;
  const std::string shape_;
  const absl::Time accepted_;
  std::atomic<int> state_{kOpen};
  std::atomic<Stage> stage_{Stage::kQueued};
  std::atomic<int64_t> stage_since_ns_;
  absl::AnyInvocable<void(absl::Status) &&> done_;
};

class InFlightRequests {
 public:
  // Registers a request about to be queued. `origin` says which transport
  // brought it and from where (CallControl::origin); `done` answers it.
  // Once GiveUpAll ran, answers it at once with GiveUpAll's status instead
  // and returns null: a request that arrives after the drain's end is not
  // run either.
  std::shared_ptr<InFlightRequest> Add(
      std::string origin, std::string shape, absl::Time accepted,
      absl::AnyInvocable<void(absl::Status) &&> done);

  // Answers every request still open with `status` (the ones a worker is
  // answering right now are left to it), and every later one (Add); returns
  // what was given up, one line each (Describe), for the log.
  std::string GiveUpAll(const absl::Status& status);

  // The /debug/requests page: a count, then one line per request, oldest
  // first.
  std::string Render() const;
  int size() const;

 private:
  friend class InFlightRequest;
  void Remove(uint64_t id);

  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::optional<absl::Status> given_up_ ABSL_GUARDED_BY(mu_);
  // Weak: a request belongs to its product; it leaves the table when it is
  // answered, or destroyed unanswered.
  absl::flat_hash_map<uint64_t, std::weak_ptr<InFlightRequest>> requests_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace matmul

#endif  // MATMUL_SERVER_PRODUCT_IN_FLIGHT_REQUESTS_H_
