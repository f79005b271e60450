// The daemon's side of stream-order-bench: a connection to a CUDA daemon
// with a session, a request ring and StreamOrderedCalls, and one NT product
// (A [M, K], B [N, K] transposed, C [M, N], BF16) whose operands live in GPU
// memory of this process registered as cuda_ipc regions. Products are queued
// on a CUDA stream of the caller's without any wait on the CPU; their
// answers are counted as they arrive, so that after a burst the caller can
// tell whether every one of them was OK.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<DaemonConnection> daemon,
//                    DaemonConnection::Open(target, options));
//   ASSIGN_OR_RETURN(std::unique_ptr<StreamOrderedProducts> products,
//                    StreamOrderedProducts::Create(*daemon, m, n, k, a, b,
//                                                  c));
//   for (...) RETURN_IF_ERROR(products->Queue(stream));
//   cudaStreamSynchronize(stream);
//   RETURN_IF_ERROR(products->WaitForAnswers(timeout));
#ifndef MATMUL_TESTS_STREAM_ORDER_BENCH_STREAM_ORDERED_PRODUCTS_H_
#define MATMUL_TESTS_STREAM_ORDER_BENCH_STREAM_ORDERED_PRODUCTS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/regions/cuda_memory.h"
#include "client/regions/registered_region.h"
#include "client/ring/request_ring.h"
#include "client/session.h"
#include "client/stream_order/stream_ordered_calls.h"
#include "matmul/v1/matmul.pb.h"

namespace matmul::stream_order_bench {

struct DaemonConnectionOptions {
  // Products in flight at once: the ring's slots and the stream-order word
  // pairs (a burst of this many never waits for a free one).
  int in_flight = 256;
  // How long the ring's completion thread polls before it sleeps.
  absl::Duration ring_spin = absl::Microseconds(100);
  // The daemon's --shm_prefix.
  std::string shm_prefix = "matmul";
  // Per call: connecting, registering, each product.
  absl::Duration timeout = absl::Seconds(60);
};

// A client, its session, one request ring and the stream-ordered calls on
// it. Members are destroyed in the reverse order of their creation.
class DaemonConnection {
 public:
  // UNAVAILABLE when no daemon answers at `target` within the timeout; the
  // daemon's status when it refuses the ring or the stream-order words (a
  // CPU daemon refuses stream-ordered products at the first one).
  static absl::StatusOr<std::unique_ptr<DaemonConnection>> Open(
      const std::string& target, const DaemonConnectionOptions& options);

  Client& client() { return *client_; }
  const Session& session() const { return *session_; }
  RequestRing& ring() { return *ring_; }
  StreamOrderedCalls& calls() { return *calls_; }
  const DaemonConnectionOptions& options() const { return options_; }

 private:
  explicit DaemonConnection(const DaemonConnectionOptions& options)
      : options_(options) {}

  const DaemonConnectionOptions options_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<RequestRing> ring_;
  std::unique_ptr<StreamOrderedCalls> calls_;
};

class StreamOrderedProducts {
 public:
  // Registers `a` ([m, k]), `b` ([n, k]) and `c` ([m, n]), BF16 each, with
  // the daemon; they must outlive this object. `connection` too.
  static absl::StatusOr<std::unique_ptr<StreamOrderedProducts>> Create(
      DaemonConnection& connection, int64_t m, int64_t n, int64_t k,
      const CudaMemory& a, const CudaMemory& b, const CudaMemory& c);

  // Waits for the answers still due (each comes within its timeout), then
  // unregisters the regions.
  ~StreamOrderedProducts();

  StreamOrderedProducts(const StreamOrderedProducts&) = delete;
  StreamOrderedProducts& operator=(const StreamOrderedProducts&) = delete;

  // Queues one product C = A B^T on `stream`, after the work queued on it
  // so far and before the work queued later; returns without waiting for
  // the daemon. An error here is one found before the request was sent.
  absl::Status Queue(cudaStream_t stream);

  // Waits up to `timeout` until every queued product has been answered;
  // the first error among the answers since the last call, if any.
  absl::Status WaitForAnswers(absl::Duration timeout);

  // One product through the ring without stream order, waited for: the
  // daemon's answer names the kernel it runs for this shape.
  absl::StatusOr<v1::MatmulResponse> RunPlain();

 private:
  explicit StreamOrderedProducts(DaemonConnection& connection)
      : connection_(connection) {}

  void Answered(absl::Status status);

  DaemonConnection& connection_;
  std::unique_ptr<RegisteredRegion> a_region_, b_region_, c_region_;
  v1::MatmulRequest request_;

  absl::Mutex mu_;
  int64_t unanswered_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace matmul::stream_order_bench

#endif  // MATMUL_TESTS_STREAM_ORDER_BENCH_STREAM_ORDERED_PRODUCTS_H_
