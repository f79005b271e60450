// matmul_client._native: the C++ client's session and request ring for the
// Python package. matmul_client uses it, when it imports, for daemons on a
// unix socket; everything else (regions, tensors, most requests) stays in
// Python, but for the common case of a stream-ordered CUDA product
// (CudaFastPath). Also the CUDA driver's buffer ids, with which the package
// tells whether a cached storage address still holds the same allocation.
#include "absl/synchronization/mutex.h"
#include "client/python/native/connection.h"
#include "client/python/native/cuda_buffer_id.h"
#include "client/python/native/cuda_fast_path.h"
#include "client/python/native/product_request.h"
#include "client/python/native/ring.h"
#include "pybind11/pybind11.h"

PYBIND11_MODULE(_native, module) {
  // As matmul-server and matmul-cli do: Debian's abseil has the deadlock
  // detector on, a process-wide lock in every Mutex::Lock (the ring's and
  // gRPC's hot paths). Process-wide, and only ever turned off.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  module.doc() =
      "The C++ matmul client (session, request ring) for matmul_client.";
  matmul::python::BindConnection(module);
  matmul::python::BindRing(module);
  matmul::python::BindProductRequest(module);
  matmul::python::BindCudaBufferId(module);
  matmul::python::BindCudaFastPath(module);
}
