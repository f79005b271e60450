// One AttachRing call: maps the client's request ring, tells the client it
// is attached, and runs a poller thread that takes each submitted slot,
// submits its request to the service (in the ring's session) and writes
// the answer back into the slot. After a submission the poller spins for
// as long as the recent gaps between submissions suggest, up to `spin`
// (adaptive_spin.h), then sleeps on the ring's doorbell.
//
// The stream ends when the client cancels it (its process may be gone:
// its queued requests are dropped), when the daemon shuts down (queued
// requests still run and are answered in their slots), or with
// FAILED_PRECONDITION when the client shrinks the ring's segment under the
// daemon (queued requests are dropped; nothing more is answered).
#ifndef MATMUL_SERVER_API_RING_REACTOR_H_
#define MATMUL_SERVER_API_RING_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/adaptive_spin.h"
#include "matmul/v1/matmul.pb.h"
#include "server/product/product_submitter.h"
#include "server/ring/attached_ring.h"
#include "server/transport/peer_credentials.h"

namespace matmul {

struct RingOptions {
  // The longest a ring's poller spins after a submission before it
  // sleeps on the doorbell (a busy core while it spins; a futex wake-up,
  // tens of microseconds on some hosts, for a request that finds it
  // asleep); it spins only while submissions come closer together than
  // this (adaptive_spin.h).
  absl::Duration poll_spin = absl::Milliseconds(2);
  // Rings attached at once (each has a poller thread); beyond this
  // AttachRing answers RESOURCE_EXHAUSTED.
  int max_rings = 64;
};

class RingReactor final : public grpc::ServerWriteReactor<v1::RingEvent> {
 public:
  // `ring` is open; `owner` is the process that attached it (its requests
  // act as that caller); `on_done` runs last, from OnDone. `submitter`
  // must outlive the reactor.
  RingReactor(ProductSubmitter& submitter, std::shared_ptr<AttachedRing> ring,
              std::string session_id, const PeerCredentials& owner,
              absl::Duration spin, std::function<void(RingReactor*)> on_done);

  // Ends the stream (daemon shutdown). Safe to call more than once and
  // concurrently with the client going away.
  void Close(const grpc::Status& status);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  void Poll();
  void Dispatch(uint32_t slot);

  ProductSubmitter& submitter_;
  // Shared with every request in flight: their answers are written into
  // the mapping after the stream may have ended.
  const std::shared_ptr<AttachedRing> ring_;
  const std::string session_id_;
  const PeerCredentials owner_;
  AdaptiveSpin spin_;
  std::function<void(RingReactor*)> on_done_;
  v1::RingEvent event_;
  std::atomic<bool> stop_{false};
  std::thread poller_;
  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_API_RING_REACTOR_H_
