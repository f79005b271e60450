// The stream-ordered products of one client process (all its sessions:
// two clients of a process may queue products on one CUDA stream) in the
// order the daemon accepted them, and which of them are launched (their
// kernel queued on the GPU). A product may wait for its client's stream on
// the GPU only once every product accepted before it is launched: a wait
// on the GPU then depends only on work already on the GPU (the client's and
// the daemon's), never on a product some worker has yet to launch, so a
// call that synchronizes the daemon's context (a lazy kernel load, a
// cudaFree) waits for it at most until the client's stream gets there, and
// cannot deadlock with it.
//
//   LaunchOrder order;                    // one per client process
//   LaunchOrder::Ticket t = order.Take();  // as each product is accepted
//   if (t.EarlierLaunched()) { /* may queue its wait on the GPU */ }
//   t.MarkLaunched();                      // its kernel is queued
// A ticket destroyed unmarked (a product refused or failed) counts as
// launched: it holds nothing up.
#ifndef MATMUL_COMMON_GEMM_LAUNCH_ORDER_H_
#define MATMUL_COMMON_GEMM_LAUNCH_ORDER_H_

#include <cstdint>
#include <memory>
#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace matmul {

class LaunchOrder {
 private:
  struct State {
    absl::Mutex mu;
    uint64_t next ABSL_GUARDED_BY(mu) = 0;
    std::set<uint64_t> unlaunched ABSL_GUARDED_BY(mu);
  };

 public:
  class Ticket {
   public:
    // An empty ticket: never "earlier launched" (its product waits on the
    // CPU), nothing to mark.
    Ticket() = default;
    Ticket(Ticket&& other) noexcept { *this = std::move(other); }
    Ticket& operator=(Ticket&& other) noexcept {
      if (this != &other) {
        MarkLaunched();
        state_ = std::move(other.state_);
        index_ = other.index_;
      }
      return *this;
    }
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { MarkLaunched(); }

    // True when every product accepted before this one is launched.
    bool EarlierLaunched() const {
      if (state_ == nullptr) return false;
      absl::MutexLock lock(&state_->mu);
      return state_->unlaunched.empty() ||
             *state_->unlaunched.begin() >= index_;
    }

    // This product's kernel is queued (or it will never be); idempotent.
    // Const: the products that share a StreamOrder read it as const.
    void MarkLaunched() const {
      if (state_ == nullptr) return;
      absl::MutexLock lock(&state_->mu);
      state_->unlaunched.erase(index_);
    }

   private:
    friend class LaunchOrder;
    Ticket(std::shared_ptr<State> state, uint64_t index)
        : state_(std::move(state)), index_(index) {}

    // Shared, so that a ticket may outlive its order (a region unregistered
    // while its product runs).
    std::shared_ptr<State> state_;
    uint64_t index_ = 0;
  };

  // The next product accepted.
  Ticket Take() {
    absl::MutexLock lock(&state_->mu);
    const uint64_t index = state_->next++;
    state_->unlaunched.insert(index);
    return Ticket(state_, index);
  }

 private:
  const std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace matmul

#endif  // MATMUL_COMMON_GEMM_LAUNCH_ORDER_H_
