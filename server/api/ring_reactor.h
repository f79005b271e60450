// One AttachRing call: maps the client's request ring, tells the client it
// is attached, and puts the ring on one of the daemon's ring pollers
// (ring_pollers.h), which hands each submitted slot to Dispatch: the
// request goes to the service (in the ring's session) and its answer is
// written back into the slot.
//
// The stream ends when the client cancels it (its process may be gone:
// its queued requests are dropped), when the daemon shuts down (queued
// requests still run and are answered in their slots), or with
// FAILED_PRECONDITION when the client shrinks the ring's segment under the
// daemon (queued requests are dropped; nothing more is answered).
#ifndef MATMUL_SERVER_API_RING_REACTOR_H_
#define MATMUL_SERVER_API_RING_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "matmul/v1/matmul.pb.h"
#include "server/product/product_submitter.h"
#include "server/ring/attached_ring.h"
#include "server/ring/ring_pollers.h"
#include "server/transport/peer_credentials.h"

namespace matmul {

struct RingOptions {
  // Threads that take requests from the rings, each serving the rings it
  // was given (ring_pollers.h).
  int pollers = 2;
  // The longest a poller spins after a submission before it sleeps on its
  // rings' doorbells (a busy core while it spins; a futex wake-up, tens of
  // microseconds on some hosts, for a request that finds it asleep); it
  // spins only while submissions come closer together than this
  // (adaptive_spin.h).
  absl::Duration poll_spin = absl::Milliseconds(2);
  // Rings attached at once; beyond this AttachRing answers
  // RESOURCE_EXHAUSTED.
  int max_rings = 64;
};

class RingReactor final : public grpc::ServerWriteReactor<v1::RingEvent> {
 public:
  // `ring` is open; `owner` is the process that attached it (its requests
  // act as that caller); `on_done` runs last, from OnDone. `submitter`
  // and `pollers` must outlive the reactor.
  RingReactor(ProductSubmitter& submitter, RingPollers& pollers,
              std::shared_ptr<AttachedRing> ring, std::string session_id,
              const PeerCredentials& owner,
              std::function<void(RingReactor*)> on_done);

  // Ends the stream (daemon shutdown). Safe to call more than once and
  // concurrently with the client going away.
  void Close(const grpc::Status& status);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  void Dispatch(uint32_t slot);
  void Faulted();

  ProductSubmitter& submitter_;
  // Shared with every request in flight: their answers are written into
  // the mapping after the stream may have ended.
  const std::shared_ptr<AttachedRing> ring_;
  const std::string session_id_;
  const PeerCredentials owner_;
  std::function<void(RingReactor*)> on_done_;
  v1::RingEvent event_;
  std::unique_ptr<RingPollers::Polled> polled_;
  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_API_RING_REACTOR_H_
