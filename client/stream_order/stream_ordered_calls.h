// matmul::StreamOrderedCalls: products ordered on the caller's CUDA stream,
// as a kernel launched on it would be: the product starts after the work
// queued on the stream before the call, the work queued after the call
// starts after the product, and the call returns without waiting for the
// GPU or for the daemon's answer.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<StreamOrderedCalls> calls,
//                    StreamOrderedCalls::Create(*client, *session, *ring));
//   RETURN_IF_ERROR(calls->Matmul(request, stream, absl::Seconds(30),
//                                 [](absl::Status status) { ... }));
//   my_kernel<<<grid, block, 0, stream>>>(c);  // reads the product's C
//
// How: each call takes a pair of 32-bit words in a small shm region of the
// session (host memory that this process's GPU and the daemon's reach) and
// a fresh sequence number. The caller's stream writes the number into the
// pair's wait word once its earlier work is done, then waits until the
// signal word reaches it (stream memory operations); the daemon waits for
// the wait word before it queues the product, and its stream writes the
// signal word after it (MatmulRequest.stream_order). The request itself goes
// through the ring asynchronously, and `done` gets the daemon's answer, which
// comes once the product is complete.
//
// Errors: Matmul returns what it finds before the request is sent (no
// CUDA, a bad stream, no free word pair within the timeout); every later
// error goes to `done`, and the caller's stream is released then (the
// signal word is written from this CPU), so it never hangs: the product's
// output is undefined in that case, as after a failed kernel.
#ifndef MATMUL_CLIENT_STREAM_ORDER_STREAM_ORDERED_CALLS_H_
#define MATMUL_CLIENT_STREAM_ORDER_STREAM_ORDERED_CALLS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/regions/registered_region.h"
#include "client/ring/request_ring.h"
#include "client/session.h"
#include "matmul/v1/matmul.pb.h"

// cudaStream_t without the CUDA headers (a build without CUDA has none).
struct CUstream_st;

namespace matmul {

class StreamOrderedCalls {
 public:
  using Stream = CUstream_st*;

  // Up to `pairs` calls in flight at once; a further call waits for one
  // to be answered. That keeps a client's products from filling the
  // daemon's queue (whose refusals would fail them) while still queueing
  // enough to keep the GPU busy. FAILED_PRECONDITION without a usable CUDA
  // driver (or in a build without CUDA).
  static absl::StatusOr<std::unique_ptr<StreamOrderedCalls>> Create(
      Client& client, const Session& session, RequestRing& ring,
      int pairs = 16);

  // Waits until every call in flight has been answered (each within its
  // timeout), then unregisters the words.
  ~StreamOrderedCalls();

  StreamOrderedCalls(const StreamOrderedCalls&) = delete;
  StreamOrderedCalls& operator=(const StreamOrderedCalls&) = delete;

  // Queues `request` (every operand in a region of the ring's session) on
  // `stream` as described above. With `signal_stream` false the work
  // queued on the stream after the call does not wait for the product:
  // `done` is then the only news of it (the asynchronous API's products,
  // which the daemon may batch). `done` runs once, on the ring's
  // completion thread; it must not block.
  absl::Status Matmul(v1::MatmulRequest request, Stream stream,
                      absl::Duration timeout, RequestRing::Callback done,
                      bool signal_stream = true);

  // Calls sent and not answered yet.
  int in_flight() const { return in_flight_.load(std::memory_order_acquire); }

 private:
  class Words;

  StreamOrderedCalls(RequestRing& ring, std::unique_ptr<Words> words);

  // A free pair, waiting up to `timeout`; nullopt when none freed.
  std::optional<int> TakePair(absl::Duration timeout);
  void ReturnPair(int pair);

  RequestRing& ring_;
  const std::unique_ptr<Words> words_;
  std::atomic<uint32_t> next_sequence_{1};
  std::atomic<int> in_flight_{0};
  absl::Mutex mu_;
  std::vector<int> free_pairs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace matmul

#endif  // MATMUL_CLIENT_STREAM_ORDER_STREAM_ORDERED_CALLS_H_
