// The threads that take requests from the attached rings. A few threads
// serve every ring, each ring served by one of them (the one with the
// fewest rings when it attaches), instead of a thread per ring: with many
// clients, a thread each would keep as many cores busy spinning as there
// are clients, beside the clients themselves and the daemon's workers.
//
// A poller passes over its rings in turn and takes at most one submission
// from each per pass (so that a busy ring cannot starve the others), hands
// it to the ring's `dispatch`, and after the last submission spins for as
// long as the recent gaps between submissions suggest, up to `spin`
// (adaptive_spin.h). Then it sleeps on all its rings' doorbells at once
// (ring::FutexWaitAny), or, on a kernel without futex_waitv, polls them
// every kFallbackPoll.
//
//   RingPollers pollers(2, absl::Milliseconds(2));
//   std::unique_ptr<RingPollers::Polled> polled = pollers.Add(
//       ring, [](uint32_t slot) { ... }, [] { ...the ring faulted... });
//   polled.reset();  // no handler of the ring runs after this returns
#ifndef MATMUL_SERVER_RING_RING_POLLERS_H_
#define MATMUL_SERVER_RING_RING_POLLERS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/adaptive_spin.h"
#include "server/ring/attached_ring.h"

namespace matmul {

class RingPollers {
 public:
  // `dispatch` gets each slot taken from the ring; `faulted` runs once, when
  // the ring's mapping faulted (the ring is not polled again). Both run on
  // the ring's poller thread and must not block: the poller's other rings
  // wait meanwhile.
  struct Handlers {
    std::function<void(uint32_t slot)> dispatch;
    std::function<void()> faulted;
  };

 private:
  class Poller;
  struct Entry;

 public:
  // A ring's place on its poller; destroying it takes the ring off. That
  // waits for the handler that may be running to return, unless it is
  // destroyed from a handler of the same poller.
  class Polled {
   public:
    Polled(Poller& poller, std::shared_ptr<Entry> entry);
    ~Polled();
    Polled(const Polled&) = delete;
    Polled& operator=(const Polled&) = delete;

   private:
    Poller& poller_;
    const std::shared_ptr<Entry> entry_;
  };

  // `threads` pollers (at least one).
  RingPollers(int threads, absl::Duration spin);
  // Every Polled must have been destroyed.
  ~RingPollers();

  std::unique_ptr<Polled> Add(std::shared_ptr<AttachedRing> ring,
                              Handlers handlers);

  // Where futex_waitv is missing: how often a poller with nothing to do
  // looks at its rings.
  static constexpr absl::Duration kFallbackPoll = absl::Microseconds(200);

 private:
  std::vector<std::unique_ptr<Poller>> pollers_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_RING_RING_POLLERS_H_
