// matmul::RequestRing: sends MatmulRequests to a daemon on the same host
// through a shared-memory ring (common/request_ring_layout.h) instead of a
// gRPC call each. The ring is a shm object this process creates; AttachRing
// hands it to the daemon, whose poller takes requests from it and writes
// each answer back into the request's slot. A round trip then costs a few
// cache-line transfers (both sides poll briefly, then sleep on futexes), not
// a socket round trip and several thread wake-ups.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<RequestRing> ring,
//                    RequestRing::Attach(*client, *session));
//   ASSIGN_OR_RETURN(v1::MatmulResponse response,
//                    ring->Matmul(request, absl::Seconds(10)));
//
// Requests act in `session` (its regions). A request whose output is inline
// (no C region), or that does not fit a slot, goes over gRPC instead: the
// ring carries descriptors, not tensors. Destroy the ring before its session
// and client, and only once no call is in progress.
#ifndef MATMUL_CLIENT_RING_REQUEST_RING_H_
#define MATMUL_CLIENT_RING_REQUEST_RING_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/held_stream.h"
#include "client/regions/shared_memory_segment.h"
#include "client/session.h"
#include "common/request_ring_layout.h"
#include "common/ring/client_protocol.h"
#include "matmul/v1/matmul.pb.h"

namespace matmul {

struct RequestRingOptions {
  // Requests in flight at once; more callers wait for a free slot.
  int slots = 64;
  // Bytes per slot, its 64-byte header included: the largest serialized
  // request or response is this minus 64. A multiple of 64. Room for a
  // product list of about twenty products in regions (a LoRA layer's
  // backward over two projections is ten).
  int slot_bytes = 4096;
  // How long a waiting caller (Call) or the completion thread (CallAsync)
  // polls before it sleeps on a futex: a busy core while it polls, a
  // wake-up when the answer finds it asleep.
  absl::Duration spin = absl::Microseconds(100);
  // Must match the daemon's --shm_prefix.
  std::string shm_prefix = "matmul";
};

class RequestRing {
 public:
  // Creates the ring, attaches it and waits up to `timeout` for the daemon
  // to say it polls it. The daemon's status when it refuses (bad options:
  // INVALID_ARGUMENT; --max_rings reached: RESOURCE_EXHAUSTED).
  static absl::StatusOr<std::unique_ptr<RequestRing>> Attach(
      Client& client, const Session& session,
      const RequestRingOptions& options = {},
      absl::Duration timeout = absl::Seconds(30));

  // Detaches (ends the AttachRing stream) and unmaps the ring; asynchronous
  // calls still in flight get CANCELLED.
  ~RequestRing();

  RequestRing(const RequestRing&) = delete;
  RequestRing& operator=(const RequestRing&) = delete;

  // Runs `request` and waits up to `timeout` for its answer; the response's
  // in-band status becomes the returned status, as for Client::Matmul.
  // Thread-safe. DEADLINE_EXCEEDED when no answer came in time (the daemon
  // drops the request if it has not started it by then); UNAVAILABLE when
  // the daemon detached the ring (it shut down) and gave no answer within
  // 5 s after.
  absl::StatusOr<v1::MatmulResponse> Matmul(const v1::MatmulRequest& request,
                                            absl::Duration timeout);

  // The same without copies: fills `response` (which may be reused from
  // call to call) and returns its status.
  absl::Status Call(const v1::MatmulRequest& request,
                    v1::MatmulResponse* response, absl::Duration timeout);

  // Sends `request` and returns once it is in the ring (waiting, up to
  // `timeout`, only when every slot is in flight; on the completion thread
  // it never waits: the call is queued until a slot frees). `done` runs
  // once, on the
  // ring's completion thread (or, when the request goes over gRPC, on a
  // gRPC thread), with what Call would return; `response` is filled before
  // and must live until then. `done` may send the next request. The way to
  // keep many requests in flight: one thread reads every answer from the
  // ring's completion queue, and the daemon need not wake anyone per answer.
  using Callback = absl::AnyInvocable<void(absl::Status) &&>;
  void CallAsync(const v1::MatmulRequest& request, v1::MatmulResponse* response,
                 absl::Duration timeout, Callback done);

  // False once the daemon ended the AttachRing stream.
  bool attached() const;

  const RequestRingOptions& options() const { return options_; }

  // The ring's shm object (unlinked once attached; mapped by both sides).
  const std::string& shm_name() const { return segment_->name(); }

 private:
  using Stream = HeldStream<v1::AttachRingRequest, v1::RingEvent>;

  RequestRing(Client& client, const RequestRingOptions& options,
              std::unique_ptr<SharedMemorySegment> segment);

  // An asynchronous call in flight, by slot.
  struct Pending {
    bool active = false;
    bool abandoned = false;  // answered already (timeout, detach)
    v1::MatmulResponse* response = nullptr;
    absl::Time deadline;
    Callback done;
  };

  // A call made on the completion thread while every slot was in flight.
  struct Deferred {
    v1::MatmulRequest request;
    v1::MatmulResponse* response = nullptr;
    absl::Time deadline;
    Callback done;
  };

  // DEADLINE_EXCEEDED: every slot stayed in flight for `timeout`.
  absl::Status NoFreeSlot(absl::Duration timeout) const;
  // True when `request` travels over gRPC instead (one product with an
  // inline output, or too large for a slot).
  bool NeedsGrpc(const v1::MatmulRequest& request) const;
  // A free slot, waiting up to `deadline` for one; nullopt on timeout.
  std::optional<uint32_t> AcquireSlot(absl::Time deadline);
  void ReleaseSlot(uint32_t slot);
  // Writes `request` into `slot` and publishes it to the daemon.
  void Submit(uint32_t slot, const v1::MatmulRequest& request,
              absl::Duration timeout, bool notify);
  // Waits for the slot's answer; false when `deadline` passed or the
  // daemon detached the ring first.
  bool WaitForAnswer(uint32_t slot, absl::Time deadline);
  // Parses the slot's answer into `response`; its status.
  absl::Status ReadAnswer(uint32_t slot, v1::MatmulResponse* response);
  // The completion thread: reads the completion queue and finishes the
  // asynchronous calls it names; fails those past their deadline.
  void CompleteLoop();
  void FinishAsync(uint32_t slot);
  // Records `done` for `slot` and submits the request (notify on).
  void SubmitAsync(uint32_t slot, const v1::MatmulRequest& request,
                   v1::MatmulResponse* response, absl::Time deadline,
                   Callback done);
  // Sends deferred calls while slots are free (completion thread).
  void SubmitDeferred();
  // Answers (with `status`) every asynchronous call past its deadline, or
  // all of them when `all`.
  void FailAsync(absl::Time now, bool all, const absl::Status& status);

  Client& client_;
  const RequestRingOptions options_;
  const std::unique_ptr<SharedMemorySegment> segment_;
  // Over segment_; its completion queue head is the completion thread's.
  ring::ClientProtocol protocol_;
  std::unique_ptr<Stream> stream_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> async_in_flight_{0};
  std::thread completion_thread_;

  absl::Mutex mu_;
  std::vector<uint32_t> free_ ABSL_GUARDED_BY(mu_);
  // Synchronous slots given up on (timed out) that the daemon still owns;
  // they are reclaimed once it marks them done.
  std::vector<uint32_t> abandoned_ ABSL_GUARDED_BY(mu_);
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::deque<Deferred> deferred_ ABSL_GUARDED_BY(mu_);
};

}  // namespace matmul

#endif  // MATMUL_CLIENT_RING_REQUEST_RING_H_
