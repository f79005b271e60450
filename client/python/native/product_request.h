// matmul::python::ProductRequest: the MatmulRequest of a product that the
// Python client describes with plain values instead of protobuf messages,
// so that a stream-ordered product builds no message in Python:
//
//   product = (a, b, c, transpose_a, transpose_b, alpha, beta, out_dtype)
//   operand = (region_id, offset_bytes, shape, strides, dtype)
//
// or a product list (MatmulRequest.products): a Python list of products,
// in which an operand whose region_id is an int names the daemon scratch
// buffer that product of the list made (ScratchRef{product,
// offset_bytes}), so that a stream-ordered list is one request built here
// as a single product is.
//
// shape and strides are tuples of ints (strides in elements; contiguous
// row-major ones are left out of the request, as the package's own
// messages leave them), dtype and out_dtype DType numbers. The daemon
// checks what the values mean; only their form is checked here.
#ifndef MATMUL_CLIENT_PYTHON_NATIVE_PRODUCT_REQUEST_H_
#define MATMUL_CLIENT_PYTHON_NATIVE_PRODUCT_REQUEST_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/types/span.h"
#include "matmul/v1/matmul.pb.h"
#include "pybind11/pybind11.h"

namespace matmul::python {

// The request for `product` in `session_id`; raises TypeError or
// ValueError when `product` does not have the form above. Needs the GIL.
v1::MatmulRequest ProductRequest(pybind11::handle product,
                                 const std::string& session_id);

// Sets `tensor`'s shape, strides (left out when contiguous row-major) and
// dtype; `strides` has one item per dimension of `shape`.
void SetLayout(absl::Span<const int64_t> shape,
               absl::Span<const int64_t> strides, v1::DType dtype,
               v1::Tensor* tensor);

// Sets `tensor` to an operand at `offset_bytes` into region `region_id`:
// shape, strides (left out when contiguous row-major, as above) and dtype.
// `strides` has one item per dimension of `shape`. ProductRequest and the
// CUDA fast path (cuda_fast_path.h) both describe operands through it.
void SetRegionTensor(std::string_view region_id, uint64_t offset_bytes,
                     absl::Span<const int64_t> shape,
                     absl::Span<const int64_t> strides, v1::DType dtype,
                     v1::Tensor* tensor);

// Adds product_request(product, session_id) -> serialized MatmulRequest to
// the module (the tests compare it with the package's messages).
void BindProductRequest(pybind11::module_& module);

}  // namespace matmul::python

#endif  // MATMUL_CLIENT_PYTHON_NATIVE_PRODUCT_REQUEST_H_
