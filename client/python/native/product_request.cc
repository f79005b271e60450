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
  const std::string region_id = items[0].cast<std::string>();
  const uint64_t offset_bytes = items[1].cast<uint64_t>();
  const py::tuple shape_items = TupleOf(items[2], -1, "a shape");
  const py::tuple stride_items =
      TupleOf(items[3], shape_items.size(), "strides");
  std::vector<int64_t> shape, strides;
  for (const py::handle d : shape_items) shape.push_back(d.cast<int64_t>());
  for (const py::handle s : stride_items) strides.push_back(s.cast<int64_t>());
  SetRegionTensor(region_id, offset_bytes, shape, strides, DTypeOf(items[4]),
                  tensor);
}

}  // namespace

void SetRegionTensor(std::string_view region_id, uint64_t offset_bytes,
                     absl::Span<const int64_t> shape,
                     absl::Span<const int64_t> strides, v1::DType dtype,
                     v1::Tensor* tensor) {
  v1::RegionRef* region = tensor->mutable_region();
  region->set_region_id(region_id.data(), region_id.size());
  region->set_offset_bytes(offset_bytes);
  bool contiguous = true;
  int64_t dense = 1;  // the row-major stride of dimension i
  for (size_t i = shape.size(); i-- > 0;) {
    contiguous = contiguous && strides[i] == dense;
    dense *= shape[i];
  }
  for (const int64_t d : shape) tensor->add_shape(d);
  if (!contiguous) {
    for (const int64_t s : strides) tensor->add_strides(s);
  }
  tensor->set_dtype(dtype);
}

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
