// The stream-ordered products of one client process (all its sessions:
// two clients of a process may queue products on one CUDA stream), by the
// numbers the client gave them as it queued their words on its streams
// (StreamOrder.number, client/stream_order/stream_order_numbers.h), and which
// of them are launched (their kernel queued on the GPU). A product may wait for
// its client's stream on the GPU only once every product numbered before it is
// launched: a wait on the GPU then depends only on work already on the GPU
// (the client's and the daemon's), never on a product some worker has yet
// to launch, so a call that synchronizes the daemon's context (a lazy
// kernel load, a cudaFree) waits for it at most until the client's stream
// gets there, and cannot deadlock with it. The numbers, not the order of
// arrival, decide: two request rings of one process, read by two threads,
// can deliver its products out of order.
//
//   LaunchOrder order(lapse);              // one per client process
//   ASSIGN_OR_RETURN(LaunchOrder::Ticket t,
//                    order.Take(number, answered_below));  // on arrival
//   if (t.EarlierLaunched()) { /* may queue its wait on the GPU */ }
//   t.MarkLaunched();                      // its kernel is queued
//
// The client says with each product which lower numbers are answered
// (answered_below), so nothing below that is waited for. A number in
// between that has not arrived `lapse` after a later product first looked
// for it (the client gave up on it before sending it, say) no longer holds
// anything up: it lapses, and is refused should it come after all. A
// ticket destroyed unmarked (a product refused or failed) counts as
// launched. Unnumbered products get an empty ticket: never "earlier
// launched", so they wait on the CPU.
#ifndef MATMUL_COMMON_GEMM_LAUNCH_ORDER_H_
#define MATMUL_COMMON_GEMM_LAUNCH_ORDER_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace matmul {

class LaunchOrder {
 private:
  struct State {
    explicit State(absl::Duration lapse) : lapse(lapse) {}
    const absl::Duration lapse;
    absl::Mutex mu;
    // Every number below is answered (the highest answered_below seen).
    uint64_t answered_below ABSL_GUARDED_BY(mu) = 1;
    // Arrived, not launched yet.
    absl::btree_set<uint64_t> waiting ABSL_GUARDED_BY(mu);
    // Launched, lapsed or refused, from answered_below on.
    absl::btree_set<uint64_t> launched ABSL_GUARDED_BY(mu);
    absl::btree_set<uint64_t> lapsed ABSL_GUARDED_BY(mu);
    // When a later product first found the number missing.
    absl::btree_map<uint64_t, absl::Time> missing_since ABSL_GUARDED_BY(mu);
  };

 public:
  // The widest span from answered_below to a number that the order
  // accepts: a client has only so many products in flight.
  static constexpr uint64_t kMaxSpan = uint64_t{1} << 16;

  class Ticket {
   public:
    // An empty ticket: never "earlier launched" (its product waits on the
    // CPU), nothing to mark.
    Ticket() = default;
    Ticket(Ticket&& other) noexcept { *this = std::move(other); }
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { MarkLaunched(); }

    // True when every product numbered from answered_below up to this one
    // is launched, or has lapsed.
    bool EarlierLaunched() const;

    // This product's kernel is queued (or it will never be); idempotent.
    // Const: the products that share a StreamOrder read it as const.
    void MarkLaunched() const;

   private:
    friend class LaunchOrder;
    Ticket(std::shared_ptr<State> state, uint64_t number,
           uint64_t answered_below)
        : state_(std::move(state)),
          number_(number),
          answered_below_(answered_below) {}

    // Shared, so that a ticket may outlive its order (a region unregistered
    // while its product runs).
    std::shared_ptr<State> state_;
    uint64_t number_ = 0;
    uint64_t answered_below_ = 0;
  };

  explicit LaunchOrder(absl::Duration lapse)
      : state_(std::make_shared<State>(lapse)) {}

  // The product numbered `number` has arrived. An empty ticket for number
  // 0 (unnumbered) and for a number the client has since called answered;
  // FAILED_PRECONDITION for a number that lapsed, INVALID_ARGUMENT for a
  // number that arrived before or one more than kMaxSpan above
  // answered_below.
  absl::StatusOr<Ticket> Take(uint64_t number, uint64_t answered_below);

 private:
  const std::shared_ptr<State> state_;
};

}  // namespace matmul

#endif  // MATMUL_COMMON_GEMM_LAUNCH_ORDER_H_
