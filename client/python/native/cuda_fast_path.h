// matmul::python::CudaFastPath: Client.matmul's common case for CUDA tensors
// in C++, so that a stream-ordered product costs a few Python-level
// attribute reads instead of the package's Python code.
//
// The common case: a, b and out (when given) are torch tensors, BF16 or
// FP32, rank 2 or 3 with positive sizes and non-negative strides, whose
// storages are all in the Client's cache (Client._cuda_storages) on one
// device, with the driver's buffer id still the cached one and the
// tensor's bytes within the cached region; the device's freed-bytes check
// is not due (Client._cuda_next_freed_check) and the device has no cached
// storage without a buffer id (Client._cuda_unidentified); no region is
// waiting to be retired and no stream-ordered failure waits to be raised.
// Then the product is built from the tensors' attributes and queued on the
// stream (Ring::QueueRequestOnStream), as the Python path queues it.
// Everything else returns None before anything was sent, and the package
// takes its Python path, which raises the errors (with their messages),
// registers storages, looks at torch's freed bytes and retires regions:
// the caches stay the package's (read here, under Client._lock, never
// written), so both paths see one state.
//
// The storage address is data_ptr() less the storage offset, as torch
// lays tensors out, which saves an untyped_storage() per operand; for the
// same reason a hit needs the tensor's extent (what the daemon reads and
// writes), not the whole storage, within the cached region.
#ifndef MATMUL_CLIENT_PYTHON_NATIVE_CUDA_FAST_PATH_H_
#define MATMUL_CLIENT_PYTHON_NATIVE_CUDA_FAST_PATH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "client/python/native/ring.h"
#include "matmul/v1/matmul.pb.h"
#include "pybind11/pybind11.h"

namespace matmul::python {

class CudaFastPath {
 public:
  // What the Client hands over once (none of it is reassigned while the
  // Client lives):
  //   queue: the Client's Ring, or (tests, benchmarks) an object with
  //     queue_request_on_stream(request_bytes, stream, timeout, tag) ->
  //     ticket and has_stream_failures() -> bool
  //   session_id: the session the regions belong to
  //   lock: Client._lock; numbers: Client._in_flight's product numbers (an
  //     iterator); retired_done, retired_on_answer: Client's deques
  //   current_stream: device index -> cudaStream_t as an int
  //   empty: torch.empty; dtypes: {torch dtype: DType number}, BF16, FP32
  //   buffer_id: None (the driver's, CudaBufferId) or the callable the
  //     Client's cache was filled with (tests)
  CudaFastPath(pybind11::object queue, std::string session_id,
               pybind11::object lock, pybind11::object numbers,
               pybind11::object retired_done,
               pybind11::object retired_on_answer,
               pybind11::object current_stream, pybind11::object empty,
               pybind11::dict dtypes, pybind11::object buffer_id);

  // Client.matmul(a, b, out, transpose_b, transpose_a, alpha, beta,
  // out_dtype, timeout, stream) for `client`: out (new when None) once
  // queued, or None where the Python path must run. Raises what
  // Ring::QueueOnStream raises (nothing was queued then), and what the
  // Client's _release_answered / _unregister_retired raise. Needs the GIL.
  pybind11::object Matmul(pybind11::handle client,
                          pybind11::handle const* args);

  // Calls to Matmul that queued a product, and that returned None.
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  struct Operand;
  struct Ref;

  // Reads a torch tensor's layout; false (no Python error set) where it is
  // not a torch tensor of the common case.
  bool ReadOperand(pybind11::handle tensor, Operand& operand);
  bool IsTorchType(PyTypeObject* type);
  // The DType of a torch dtype object, or nullopt.
  std::optional<v1::DType> DTypeOfTorch(PyObject* dtype) const;
  // `operand`'s region and offset from the Client's storage cache, its
  // buffer id checked; false on a miss. Under Client._lock.
  bool Look(PyObject* storages, const Operand& operand, Ref& ref);
  // The device index of `operand`'s cached storage, unchecked; -1 when
  // none is cached.
  long PeekDevice(PyObject* storages,  // NOLINT(runtime/int)
                  const Operand& operand);
  std::optional<uint64_t> BufferId(uintptr_t address);
  // torch.empty(shape, device=device, dtype=<dtype's>), or null (no Python
  // error cleared).
  pybind11::object Empty(const std::vector<int64_t>& shape, v1::DType dtype,
                         PyObject* device);
  uint64_t Queue(v1::MatmulRequest request, uintptr_t stream, double timeout_s,
                 uint64_t tag);
  bool HasStreamFailures();

  const pybind11::object queue_;
  Ring* const ring_;  // queue_ as a Ring, or null
  const std::string session_id_;
  const pybind11::object lock_acquire_, lock_release_;
  const pybind11::object numbers_;
  const pybind11::object retired_done_, retired_on_answer_;
  const pybind11::object current_stream_;
  const pybind11::object empty_;
  const pybind11::object buffer_id_;
  // (torch dtype, DType) for BF16 and FP32.
  std::vector<std::pair<pybind11::object, v1::DType>> dtypes_;
  // Tensor types found to be torch's (by the package's rule: their module
  // is torch or below it).
  std::vector<pybind11::object> torch_types_;
  // torch.device of each device index seen, for a new out.
  std::vector<pybind11::object> devices_;
  uint64_t hits_ = 0, misses_ = 0;
};

// Adds the CudaFastPath class to the module.
void BindCudaFastPath(pybind11::module_& module);

}  // namespace matmul::python

#endif  // MATMUL_CLIENT_PYTHON_NATIVE_CUDA_FAST_PATH_H_
