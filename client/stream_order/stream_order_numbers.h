// matmul::StreamOrderNumbers: one numbering of the stream-ordered products
// of this process, in the order their stream writes reach the CUDA streams.
//
// The daemon lets a product wait for its client's stream on the GPU only
// once every product its process queued earlier is launched (on any stream:
// a call that synchronizes the daemon's context waits for every wait it has
// queued). Products of one process reach it through several request rings,
// read by several threads, so the order it receives them in is not the
// order they were queued in; each carries its number instead
// (StreamOrder.number), and the lowest number of the process still
// unanswered when it was taken (StreamOrder.answered_below): the daemon
// needs to know of no product below that.
//
//   StreamOrderNumbers& numbers = StreamOrderNumbers::OfThisProcess();
//   absl::StatusOr<StreamOrderNumbers::Number> number =
//       numbers.Take([&] { return QueueStreamWrites(); });
//   ... send number->number and number->answered_below with the request ...
//   numbers.Answered(number->number);  // once the answer (or error) is in
#ifndef MATMUL_CLIENT_STREAM_ORDER_STREAM_ORDER_NUMBERS_H_
#define MATMUL_CLIENT_STREAM_ORDER_STREAM_ORDER_NUMBERS_H_

#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace matmul {

class StreamOrderNumbers {
 public:
  struct Number {
    uint64_t number = 0;
    uint64_t answered_below = 0;
  };

  // The process's numbering. One per process by design: the order it
  // keeps is the process's, whichever client object queues a product.
  static StreamOrderNumbers& OfThisProcess();

  StreamOrderNumbers() = default;
  StreamOrderNumbers(const StreamOrderNumbers&) = delete;
  StreamOrderNumbers& operator=(const StreamOrderNumbers&) = delete;

  // Runs `queue` (the product's writes to its CUDA stream) and, when it
  // succeeds, numbers the product; both under one lock, so that numbers
  // follow the order in which products reach their streams. A product
  // numbered here is unanswered until Answered. Numbers start at 1 (0 is
  // an unnumbered request).
  absl::StatusOr<Number> Take(const std::function<absl::Status()>& queue);

  // The product is answered (done, failed, or given up on).
  void Answered(uint64_t number);

 private:
  absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 1;
  absl::btree_set<uint64_t> unanswered_ ABSL_GUARDED_BY(mu_);
};

}  // namespace matmul

#endif  // MATMUL_CLIENT_STREAM_ORDER_STREAM_ORDER_NUMBERS_H_
