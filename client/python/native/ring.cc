#include "client/python/native/ring.h"

#include <string>
#include <utility>

#include "client/python/native/matmul_error.h"
#include "client/python/native/product_request.h"
#include "client/python/native/python_callback.h"
#include "client/python/native/without_gil.h"
#include "matmul/v1/matmul.pb.h"
#include "pybind11/stl.h"

namespace matmul::python {
namespace {

namespace py = pybind11;

v1::MatmulRequest ParseRequest(const py::bytes& serialized) {
  char* data = nullptr;
  Py_ssize_t size = 0;
  if (PyBytes_AsStringAndSize(serialized.ptr(), &data, &size) != 0) {
    throw py::error_already_set();
  }
  v1::MatmulRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) {
    throw py::value_error("request is not a serialized MatmulRequest");
  }
  return request;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Ring>> Ring::Attach(
    std::shared_ptr<Connection> connection, const RequestRingOptions& options,
    absl::Duration timeout) {
  absl::StatusOr<std::unique_ptr<RequestRing>> ring = RequestRing::Attach(
      connection->client(), connection->session(), options, timeout);
  if (!ring.ok()) return ring.status();
  // The constructor is private, so std::make_unique cannot reach it.
  return std::unique_ptr<Ring>(
      new Ring(std::move(connection), *std::move(ring)));
}

Ring::~Ring() { Close(); }

void Ring::Close() {
  WithoutGil([this] {
    std::unique_ptr<StreamOrderedCalls> stream_calls;
    std::unique_ptr<RequestRing> ring;
    std::shared_ptr<Connection> connection;
    {
      absl::MutexLock lock(&mu_);
      stream_calls = std::move(stream_calls_);
      ring = std::move(ring_);
      connection = std::move(connection_);
    }
    // Outside the lock: a callback that runs while the ring detaches may
    // call into this Ring (and find it closed). The stream calls first:
    // they wait for their answers, which come through the ring.
    stream_calls.reset();
    ring.reset();
    connection.reset();
  });
}

bool Ring::attached() const {
  absl::ReaderMutexLock lock(&mu_);
  return ring_ != nullptr && ring_->attached();
}

py::bytes Ring::Call(const py::bytes& request, double timeout_s) {
  const v1::MatmulRequest parsed = ParseRequest(request);
  v1::MatmulResponse response;
  std::string serialized;
  absl::Status status;
  bool closed = false;
  {
    py::gil_scoped_release release;
    absl::ReaderMutexLock lock(&mu_);
    if (ring_ == nullptr) {
      closed = true;
    } else {
      status = ring_->Call(parsed, &response, absl::Seconds(timeout_s));
      if (status.ok()) serialized = response.SerializeAsString();
    }
  }
  if (closed) throw py::value_error("the request ring is closed");
  if (!status.ok()) RaiseMatmulError(status);
  return py::bytes(serialized);
}

void Ring::CallAsync(const py::bytes& request, double timeout_s,
                     py::object callback) {
  const v1::MatmulRequest parsed = ParseRequest(request);
  // Heap-allocated: it must stay put until the answer is written into it.
  auto response = std::make_unique<v1::MatmulResponse>();
  v1::MatmulResponse* response_ptr = response.get();
  PythonCallback done(callback);
  bool closed = false;
  {
    py::gil_scoped_release release;
    absl::ReaderMutexLock lock(&mu_);
    if (ring_ == nullptr) {
      closed = true;
    } else {
      ring_->CallAsync(parsed, response_ptr, absl::Seconds(timeout_s),
                       [response = std::move(response),
                        done = std::move(done)](absl::Status status) mutable {
                         std::string serialized;
                         if (status.ok())
                           serialized = response->SerializeAsString();
                         py::gil_scoped_acquire acquire;
                         if (status.ok()) {
                           done.CallOnce(py::bytes(serialized), py::none());
                         } else {
                           done.CallOnce(py::none(), MatmulError(status));
                         }
                       });
    }
  }
  if (closed) throw py::value_error("the request ring is closed");
}

absl::Status Ring::SendOnStream(v1::MatmulRequest request, uintptr_t stream,
                                double timeout_s, bool signal_stream,
                                RequestRing::Callback done, bool& closed) {
  while (true) {
    {
      // Shared: a call waiting for a free word pair holds up no other.
      absl::ReaderMutexLock lock(&mu_);
      if (ring_ == nullptr) {
        closed = true;
        return absl::OkStatus();
      }
      if (stream_calls_ != nullptr) {
        return stream_calls_->Matmul(
            std::move(request),
            reinterpret_cast<StreamOrderedCalls::Stream>(stream),
            absl::Seconds(timeout_s), std::move(done), signal_stream);
      }
    }
    // The first stream-ordered product makes the calls, once, under the
    // exclusive lock.
    absl::MutexLock lock(&mu_);
    if (ring_ != nullptr && stream_calls_ == nullptr) {
      absl::StatusOr<std::unique_ptr<StreamOrderedCalls>> calls =
          StreamOrderedCalls::Create(connection_->client(),
                                     connection_->session(), *ring_);
      if (!calls.ok()) return calls.status();
      stream_calls_ = *std::move(calls);
    }
  }
}

uint64_t Ring::QueueOnStream(py::handle product, uintptr_t stream,
                             double timeout_s, uint64_t tag) {
  return QueueRequestOnStream(ProductRequest(product, session_id_), stream,
                              timeout_s, tag);
}

uint64_t Ring::QueueRequestOnStream(v1::MatmulRequest request, uintptr_t stream,
                                    double timeout_s, uint64_t tag) {
  absl::Status status;
  bool closed = false;
  uint64_t ticket = 0;
  {
    py::gil_scoped_release release;
    ticket = tickets_.Issue();
    status = SendOnStream(
        std::move(request), stream, timeout_s, /*signal_stream=*/true,
        [this, ticket, tag](absl::Status answer) {
          tickets_.Answer(ticket, std::move(answer), tag);
        },
        closed);
    // Never sent: the caller gets the error, and nothing waits for it.
    if (closed || !status.ok()) tickets_.Answer(ticket, absl::OkStatus());
  }
  if (closed) throw py::value_error("the request ring is closed");
  if (!status.ok()) RaiseMatmulError(status);
  return ticket;
}

void Ring::CallOnStream(py::handle product, uintptr_t stream, double timeout_s,
                        bool signal_stream, py::object callback) {
  v1::MatmulRequest request = ProductRequest(product, session_id_);
  PythonCallback done(callback);
  absl::Status status;
  bool closed = false;
  {
    py::gil_scoped_release release;
    status = SendOnStream(
        std::move(request), stream, timeout_s, signal_stream,
        [done = std::move(done)](absl::Status answer) mutable {
          py::gil_scoped_acquire acquire;
          done.CallOnce(py::none(), answer.ok() ? py::object(py::none())
                                                : MatmulError(answer));
        },
        closed);
  }
  if (closed) throw py::value_error("the request ring is closed");
  if (!status.ok()) RaiseMatmulError(status);
}

py::list Ring::TakeStreamFailures() {
  py::list failures;
  if (!tickets_.has_failures()) return failures;
  for (CallTickets::Failure& failure : tickets_.TakeFailures()) {
    failures.append(py::make_tuple(failure.ticket, failure.tag,
                                   MatmulError(failure.status)));
  }
  return failures;
}

bool Ring::WaitStreamCalls(std::optional<double> timeout_s) {
  py::gil_scoped_release release;
  return tickets_.WaitForAnswers(timeout_s ? absl::Seconds(*timeout_s)
                                           : absl::InfiniteDuration());
}

void BindRing(py::module_& module) {
  py::class_<Ring>(module, "Ring",
                   "A request ring attached to a Connection's session "
                   "(C++ matmul::RequestRing): products without a gRPC call "
                   "each.")
      .def(py::init([](std::shared_ptr<Connection> connection, int slots,
                       const std::string& shm_prefix, double timeout,
                       double spin_us) {
             RequestRingOptions options;
             options.slots = slots;
             options.shm_prefix = shm_prefix;
             options.spin = absl::Microseconds(spin_us);
             absl::StatusOr<std::unique_ptr<Ring>> ring;
             {
               py::gil_scoped_release release;
               ring = Ring::Attach(std::move(connection), options,
                                   absl::Seconds(timeout));
             }
             if (!ring.ok()) RaiseMatmulError(ring.status());
             return *std::move(ring);
           }),
           py::arg("connection"), py::arg("slots") = 64,
           py::arg("shm_prefix") = "matmul", py::arg("timeout") = 30.0,
           py::arg("spin_us") =
               absl::ToDoubleMicroseconds(RequestRingOptions().spin))
      .def("call", &Ring::Call, py::arg("request"), py::arg("timeout"),
           "Serialized MatmulRequest -> serialized MatmulResponse; raises "
           "MatmulError. The GIL is released while it waits.")
      .def("call_async", &Ring::CallAsync, py::arg("request"),
           py::arg("timeout"), py::arg("callback"),
           "Sends the request; callback(response_bytes, None) or "
           "callback(None, MatmulError) runs later on the ring's completion "
           "thread, with the GIL.")
      .def("queue_on_stream", &Ring::QueueOnStream, py::arg("product"),
           py::arg("stream"), py::arg("timeout"), py::arg("tag"),
           "Queues the product (a, b, c, transpose_a, transpose_b, alpha, "
           "beta, out_dtype; see product_request), or a list of them (one "
           "product list request), on the CUDA stream (a "
           "cudaStream_t as an int), the stream's later work waiting for "
           "it, and returns its ticket without waiting; a failure comes "
           "back from take_stream_failures with `tag`.")
      .def("call_on_stream", &Ring::CallOnStream, py::arg("product"),
           py::arg("stream"), py::arg("timeout"), py::arg("signal_stream"),
           py::arg("callback"),
           "As queue_on_stream, with callback(None, None) or "
           "callback(None, MatmulError) run once the daemon answers; with "
           "signal_stream false the stream's later work does not wait.")
      .def("take_stream_failures", &Ring::TakeStreamFailures,
           "[(ticket, tag, MatmulError)] of the queue_on_stream products "
           "that failed since the last call, by ticket.")
      .def("has_stream_failures", &Ring::HasStreamFailures,
           "Whether take_stream_failures has anything to give.")
      .def("answered_through", &Ring::AnsweredThrough,
           "Every queue_on_stream ticket below this one is answered.")
      .def("wait_stream_calls", &Ring::WaitStreamCalls,
           py::arg("timeout") = py::none(),
           "Waits until every queue_on_stream product queued so far is "
           "answered (timeout in seconds, None: no limit); False when some "
           "still were not.")
      .def("close", &Ring::Close,
           "Detaches the ring; products still in flight fail with CANCELLED.")
      .def_property_readonly("attached", &Ring::attached);
}

}  // namespace matmul::python
