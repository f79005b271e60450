// matmul::python::Ring: a request ring (matmul::RequestRing) attached to a
// Connection's session, for the matmul_client._native extension. Requests
// and responses cross the binding serialized (the package builds them with
// its protobuf stubs), except stream-ordered products, which the package
// describes with plain values (product_request.h); the wait for an answer
// runs without the GIL.
#ifndef MATMUL_CLIENT_PYTHON_NATIVE_RING_H_
#define MATMUL_CLIENT_PYTHON_NATIVE_RING_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/call_tickets.h"
#include "client/python/native/connection.h"
#include "client/ring/request_ring.h"
#include "client/stream_order/stream_ordered_calls.h"
#include "matmul/v1/matmul.pb.h"
#include "pybind11/pybind11.h"

namespace matmul::python {

class Ring {
 public:
  // Attaches a ring to `connection`'s session; holds the connection until
  // the ring is closed.
  static absl::StatusOr<std::unique_ptr<Ring>> Attach(
      std::shared_ptr<Connection> connection, const RequestRingOptions& options,
      absl::Duration timeout);

  // Detaches, as Close.
  ~Ring();

  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // One product: `request` is a serialized MatmulRequest; returns the
  // serialized MatmulResponse, or raises MatmulError with the status
  // RequestRing::Call returns (the daemon's in-band status, or the ring's
  // own DEADLINE_EXCEEDED / UNAVAILABLE). Needs the GIL; releases it while
  // waiting.
  pybind11::bytes Call(const pybind11::bytes& request, double timeout_s);

  // Sends one product and returns once it is in the ring; `callback` runs
  // later, on the ring's completion thread with the GIL held, as
  // callback(response_bytes, None) or callback(None, MatmulError). Needs
  // the GIL; releases it while waiting for a free slot.
  void CallAsync(const pybind11::bytes& request, double timeout_s,
                 pybind11::object callback);

  // Queues one product on the caller's CUDA stream `stream` (a
  // cudaStream_t as an integer) and returns without waiting for it
  // (matmul::StreamOrderedCalls): the work queued on the stream after the
  // call waits for the product. `product` is described as ProductRequest
  // takes it. Returns the product's ticket (1, 2, 3... per ring); its
  // outcome stays here: a failure comes back from TakeStreamFailures with
  // `tag`, and AnsweredThrough / WaitStreamCalls say when it is answered
  // (the product is then complete). Nothing runs in Python when the answer
  // comes. Raises MatmulError for what fails before the request is sent
  // (FAILED_PRECONDITION without a usable CUDA driver); that product has no
  // ticket. Needs the GIL; releases it while sending.
  uint64_t QueueOnStream(pybind11::handle product, uintptr_t stream,
                         double timeout_s, uint64_t tag);

  // QueueOnStream of a request already built (its session_id set): the
  // CUDA fast path's (cuda_fast_path.h). Raises as QueueOnStream.
  uint64_t QueueRequestOnStream(v1::MatmulRequest request, uintptr_t stream,
                                double timeout_s, uint64_t tag);

  // The same with the outcome delivered to `callback`, which runs as for
  // CallAsync once the daemon answers, as callback(None, None) or
  // callback(None, MatmulError); with `signal_stream` false the work
  // queued after the call does not wait for the product (the asynchronous
  // API's products, which the daemon may batch).
  void CallOnStream(pybind11::handle product, uintptr_t stream,
                    double timeout_s, bool signal_stream,
                    pybind11::object callback);

  // The QueueOnStream products that failed since the last call, by ticket,
  // as (ticket, tag, MatmulError); no lock when there are none.
  pybind11::list TakeStreamFailures();

  // Whether TakeStreamFailures has anything (no lock, no GIL needed).
  bool HasStreamFailures() const { return tickets_.has_failures(); }

  // Every QueueOnStream ticket below this one is answered.
  uint64_t AnsweredThrough() const { return tickets_.answered_through(); }

  // Waits (without the GIL) until every QueueOnStream product queued
  // before the call is answered, up to `timeout_s` (none: no limit; each
  // product's own timeout bounds it anyway); false when some still were
  // not.
  bool WaitStreamCalls(std::optional<double> timeout_s);

  // Detaches the ring (calls still in flight get CANCELLED through their
  // callbacks) and lets go of the connection. Waits for synchronous calls
  // in progress; later calls raise ValueError. Releases the GIL while the
  // completion thread ends (it may be waiting for the GIL to run a
  // callback).
  void Close();

  bool attached() const;

 private:
  Ring(std::shared_ptr<Connection> connection,
       std::unique_ptr<RequestRing> ring)
      : session_id_(connection->session().session_id()),
        connection_(std::move(connection)),
        ring_(std::move(ring)) {}

  // Sends `request` through the stream-ordered calls (made on first use),
  // as StreamOrderedCalls::Matmul. Sets `closed` instead when the ring is
  // closed. Without the GIL.
  absl::Status SendOnStream(v1::MatmulRequest request, uintptr_t stream,
                            double timeout_s, bool signal_stream,
                            RequestRing::Callback done, bool& closed);

  const std::string session_id_;
  // The QueueOnStream products; outlives the stream calls that answer
  // them.
  CallTickets tickets_;

  // Held shared by a call while it uses the ring, exclusively by Close
  // while it takes the ring away: a ring is never destroyed under a call.
  // Never held with the GIL (a callback may need the GIL while the ring's
  // destruction waits for it).
  mutable absl::Mutex mu_;
  // Declared first: destroyed after the ring that uses its client and
  // session.
  std::shared_ptr<Connection> connection_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<RequestRing> ring_ ABSL_GUARDED_BY(mu_);
  // Made on the first CallOnStream; destroyed before the ring it uses.
  std::unique_ptr<StreamOrderedCalls> stream_calls_ ABSL_GUARDED_BY(mu_);
};

// Adds the Ring class to the module.
void BindRing(pybind11::module_& module);

}  // namespace matmul::python

#endif  // MATMUL_CLIENT_PYTHON_NATIVE_RING_H_
