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

// An operand tuple; an int region_id names the scratch buffer of that
// product of the list (offset_bytes into it) instead of a region.
void SetTensor(py::handle operand, v1::Tensor* tensor) {
  const py::tuple items = TupleOf(operand, 5, "an operand");
  const uint64_t offset_bytes = items[1].cast<uint64_t>();
  const py::tuple shape_items = TupleOf(items[2], -1, "a shape");
  const py::tuple stride_items =
      TupleOf(items[3], shape_items.size(), "strides");
  std::vector<int64_t> shape, strides;
  for (const py::handle d : shape_items) shape.push_back(d.cast<int64_t>());
  for (const py::handle s : stride_items) strides.push_back(s.cast<int64_t>());
  if (PyLong_Check(items[0].ptr())) {
    v1::ScratchRef* scratch = tensor->mutable_scratch();
    scratch->set_product(items[0].cast<uint32_t>());
    scratch->set_offset_bytes(offset_bytes);
    SetLayout(shape, strides, DTypeOf(items[4]), tensor);
    return;
  }
  SetRegionTensor(items[0].cast<std::string>(), offset_bytes, shape, strides,
                  DTypeOf(items[4]), tensor);
}

// One product's operands and options (no session: a list item has none).
void SetProduct(py::handle product, v1::MatmulRequest* request) {
  const py::tuple items = TupleOf(product, 8, "a product");
  SetTensor(items[0], request->mutable_a());
  SetTensor(items[1], request->mutable_b());
  SetTensor(items[2], request->mutable_c());
  request->set_transpose_a(items[3].cast<bool>());
  request->set_transpose_b(items[4].cast<bool>());
  request->set_alpha(items[5].cast<float>());
  request->set_beta(items[6].cast<float>());
  request->set_out_dtype(DTypeOf(items[7]));
}

}  // namespace

void SetLayout(absl::Span<const int64_t> shape,
               absl::Span<const int64_t> strides, v1::DType dtype,
               v1::Tensor* tensor) {
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

void SetRegionTensor(std::string_view region_id, uint64_t offset_bytes,
                     absl::Span<const int64_t> shape,
                     absl::Span<const int64_t> strides, v1::DType dtype,
                     v1::Tensor* tensor) {
  v1::RegionRef* region = tensor->mutable_region();
  region->set_region_id(region_id.data(), region_id.size());
  region->set_offset_bytes(offset_bytes);
  SetLayout(shape, strides, dtype, tensor);
}

v1::MatmulRequest ProductRequest(py::handle product,
                                 const std::string& session_id) {
  v1::MatmulRequest request;
  if (PyList_Check(product.ptr())) {
    // A product list: the items are products of the form above.
    const py::list items = py::reinterpret_borrow<py::list>(product);
    request.mutable_products()->Reserve(static_cast<int>(items.size()));
    for (const py::handle item : items) {
      SetProduct(item, request.add_products());
    }
  } else {
    SetProduct(product, &request);
  }
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
      "operand (region_id, offset_bytes, shape, strides, dtype), or of a "
      "product list (a Python list of such products; an int region_id is "
      "then the scratch buffer of that product): what "
      "Ring.queue_on_stream sends.");
}

}  // namespace matmul::python
