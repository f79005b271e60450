// Threads that answer calls once their product has run, so that a worker
// can start the next launch while the previous batch's responses are
// built and written (gRPC serialises and writes each on the thread that
// finishes the call: ~10 us a response, which would hold a worker for most
// of a millisecond after a batch of 64).
#ifndef MATMUL_SERVER_RESPONDER_H_
#define MATMUL_SERVER_RESPONDER_H_

#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace matmul {

class Responder {
 public:
  using Task = absl::AnyInvocable<void() &&>;

  // `threads` >= 1.
  explicit Responder(int threads);
  ~Responder() { Drain(); }

  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;

  int threads() const { return threads_; }

  // Runs `task` on a responder thread; never refuses (after Drain, it runs
  // on the caller's thread).
  void Post(Task task);

  // Runs everything posted and joins the threads. Idempotent.
  void Drain();

 private:
  void Loop();

  const int threads_;
  absl::Mutex mu_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex join_mu_;
  std::vector<std::thread> workers_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_RESPONDER_H_
