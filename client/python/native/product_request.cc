#include "client/python/native/product_request.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"

namespace matmul::python {
namespace {

namespace py = pybind11;

// `value` as a tuple; of `size` items unless `size` is negative.
py::tuple TupleOf(py::handle value, Py_ssize_t size, const char* what) {
  if (!PyTuple_Check(value.ptr())) {
    throw py::type_error(absl::StrCat(what, ": expected a tuple, got ",
                                      Py_TYPE(value.ptr())->tp_name));
  }
  if (size >= 0 && PyTuple_GET_SIZE(value.ptr()) != size) {
    throw py::value_error(absl::StrCat(what, ": expected ", size,
                                       " items, got ",
                                       PyTuple_GET_SIZE(value.ptr())));
  }
  return py::reinterpret_borrow<py::tuple>(value);
}

v1::DType DTypeOf(py::handle value) {
  const int dtype = value.cast<int>();
  if (!v1::DType_IsValid(dtype)) {
    throw py::value_error(absl::StrCat("no DType numbered ", dtype));
  }
  return static_cast<v1::DType>(dtype);
}

void SetTensor(py::handle operand, v1::Tensor* tensor) {
  const py::tuple items = TupleOf(operand, 5, "an operand");
  v1::RegionRef* region = tensor->mutable_region();
  region->set_region_id(items[0].cast<std::string>());
  region->set_offset_bytes(items[1].cast<uint64_t>());
  const py::tuple shape = TupleOf(items[2], -1, "a shape");
  const py::tuple strides = TupleOf(items[3], shape.size(), "strides");
  std::vector<int64_t> contiguous(shape.size(), 1);
  for (size_t i = 0; i < shape.size(); ++i) {
    tensor->add_shape(shape[i].cast<int64_t>());
  }
  for (size_t i = shape.size(); i-- > 1;) {
    contiguous[i - 1] = contiguous[i] * tensor->shape(static_cast<int>(i));
  }
  bool is_contiguous = true;
  for (size_t i = 0; i < strides.size(); ++i) {
    tensor->add_strides(strides[i].cast<int64_t>());
    is_contiguous =
        is_contiguous && tensor->strides(static_cast<int>(i)) == contiguous[i];
  }
  if (is_contiguous) tensor->clear_strides();
  tensor->set_dtype(DTypeOf(items[4]));
}

}  // namespace

v1::MatmulRequest ProductRequest(py::handle product,
                                 const std::string& session_id) {
  const py::tuple items = TupleOf(product, 8, "a product");
  v1::MatmulRequest request;
  SetTensor(items[0], request.mutable_a());
  SetTensor(items[1], request.mutable_b());
  SetTensor(items[2], request.mutable_c());
  request.set_transpose_a(items[3].cast<bool>());
  request.set_transpose_b(items[4].cast<bool>());
  request.set_alpha(items[5].cast<float>());
  request.set_beta(items[6].cast<float>());
  request.set_out_dtype(DTypeOf(items[7]));
  request.set_session_id(session_id);
  return request;
}

void BindProductRequest(py::module_& module) {
  module.def(
      "product_request",
      [](py::handle product, const std::string& session_id) {
        return py::bytes(
            ProductRequest(product, session_id).SerializeAsString());
      },
      py::arg("product"), py::arg("session_id"),
      "The serialized MatmulRequest of a product described as "
      "(a, b, c, transpose_a, transpose_b, alpha, beta, out_dtype), each "
      "operand (region_id, offset_bytes, shape, strides, dtype): what "
      "Ring.queue_on_stream sends.");
}

}  // namespace matmul::python
