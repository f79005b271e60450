#include "client/python/native/cuda_fast_path.h"

#include <time.h>

#include <string_view>
#include <utility>

#include "absl/types/span.h"
#include "client/python/native/cuda_buffer_id.h"
#include "client/python/native/product_request.h"

namespace matmul::python {

namespace py = pybind11;

namespace {

// Attribute names, interned once.
struct Names {
  PyObject* Intern(const char* name) {
    return PyUnicode_InternFromString(name);
  }
  PyObject* const dtype = Intern("dtype");
  PyObject* const shape = Intern("shape");
  PyObject* const stride = Intern("stride");
  PyObject* const storage_offset = Intern("storage_offset");
  PyObject* const data_ptr = Intern("data_ptr");
  PyObject* const device = Intern("device");
  PyObject* const module = Intern("__module__");
  PyObject* const cuda_stream = Intern("cuda_stream");
  PyObject* const closed = Intern("_closed");
  PyObject* const retired = Intern("_retired");
  PyObject* const storages = Intern("_cuda_storages");
  PyObject* const unidentified = Intern("_cuda_unidentified");
  PyObject* const next_check = Intern("_cuda_next_freed_check");
  PyObject* const timeout = Intern("timeout");
  PyObject* const release_answered = Intern("_release_answered");
  PyObject* const unregister_retired = Intern("_unregister_retired");
  // torch.empty(shape, device=..., dtype=...)
  PyObject* const empty_kwnames = Py_BuildValue("(ss)", "device", "dtype");
};

const Names& N() {
  static const Names* const names = new Names();
  return *names;
}

py::object Steal(PyObject* object) {
  return py::reinterpret_steal<py::object>(object);
}

// A miss: false, with no Python error left set.
bool Miss() {
  PyErr_Clear();
  return false;
}

bool AsInt64(PyObject* value, int64_t& out) {
  if (!PyLong_Check(value)) return false;
  out = PyLong_AsLongLong(value);
  return !(out == -1 && PyErr_Occurred()) || Miss();
}

bool AsUint64(PyObject* value, uint64_t& out) {
  if (!PyLong_Check(value)) return false;
  out = PyLong_AsUnsignedLongLong(value);
  return !(out == static_cast<uint64_t>(-1) && PyErr_Occurred()) || Miss();
}

// A float or an int (not a bool, nor anything Python converts otherwise):
// what the Python path turns into the request's float the same way.
bool AsDouble(PyObject* value, double& out) {
  if (!PyFloat_CheckExact(value) && !PyLong_CheckExact(value)) return false;
  out = PyFloat_AsDouble(value);
  return !(out == -1.0 && PyErr_Occurred()) || Miss();
}

// time.monotonic(): the clock of Client._cuda_next_freed_check.
double MonotonicSeconds() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * now.tv_nsec;
}

// A Python lock held for a scope (acquire() and release() as bound
// methods).
class LockHolder {
 public:
  LockHolder(const py::object& acquire, const py::object& release)
      : release_(release) {
    py::object held = Steal(PyObject_CallNoArgs(acquire.ptr()));
    if (!held) throw py::error_already_set();
  }
  ~LockHolder() {
    PyObject* type;
    PyObject* value;
    PyObject* traceback;
    // Keeps an error being raised across the release.
    PyErr_Fetch(&type, &value, &traceback);
    Py_XDECREF(PyObject_CallNoArgs(release_.ptr()));
    PyErr_Restore(type, value, traceback);
  }
  LockHolder(const LockHolder&) = delete;
  LockHolder& operator=(const LockHolder&) = delete;

 private:
  const py::object& release_;
};

}  // namespace

struct CudaFastPath::Operand {
  uintptr_t data = 0;          // data_ptr()
  int64_t storage_offset = 0;  // elements
  int rank = 0;
  int64_t shape[3] = {};
  int64_t strides[3] = {};
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  int64_t element_bytes = 0;

  // torch's layout: the tensor starts storage_offset elements into its
  // storage.
  uintptr_t storage() const {
    return data - static_cast<uintptr_t>(storage_offset * element_bytes);
  }
  // Bytes from the first element to the end of the last.
  uint64_t extent_bytes() const {
    int64_t elements = 1;
    for (int i = 0; i < rank; ++i) elements += (shape[i] - 1) * strides[i];
    return static_cast<uint64_t>(elements * element_bytes);
  }
};

struct CudaFastPath::Ref {
  std::string region_id;
  uint64_t offset = 0;
  py::object device;       // the cache's device index (an int)
  long device_index = -1;  // NOLINT(runtime/int): PyLong_AsLong's type
};

CudaFastPath::CudaFastPath(py::object queue, std::string session_id,
                           py::object lock, py::object numbers,
                           py::object retired_done,
                           py::object retired_on_answer,
                           py::object current_stream, py::object empty,
                           py::dict dtypes, py::object buffer_id)
    : queue_(std::move(queue)),
      ring_(py::isinstance<Ring>(queue_) ? queue_.cast<Ring*>() : nullptr),
      session_id_(std::move(session_id)),
      lock_acquire_(lock.attr("acquire")),
      lock_release_(lock.attr("release")),
      numbers_(std::move(numbers)),
      retired_done_(std::move(retired_done)),
      retired_on_answer_(std::move(retired_on_answer)),
      current_stream_(std::move(current_stream)),
      empty_(std::move(empty)),
      buffer_id_(std::move(buffer_id)) {
  for (auto [dtype, number] : dtypes) {
    const int value = number.cast<int>();
    if (value != v1::DTYPE_BF16 && value != v1::DTYPE_FP32) {
      throw py::value_error("dtypes maps onto DTYPE_BF16 and DTYPE_FP32");
    }
    dtypes_.emplace_back(py::reinterpret_borrow<py::object>(dtype),
                         static_cast<v1::DType>(value));
  }
}

bool CudaFastPath::IsTorchType(PyTypeObject* type) {
  for (const py::object& known : torch_types_) {
    if (known.ptr() == reinterpret_cast<PyObject*>(type)) return true;
  }
  // The package's rule (_operands._is_torch): type(x).__module__ is torch
  // or below it.
  py::object module =
      Steal(PyObject_GetAttr(reinterpret_cast<PyObject*>(type), N().module));
  if (!module || !PyUnicode_Check(module.ptr())) return Miss();
  Py_ssize_t size = 0;
  const char* name = PyUnicode_AsUTF8AndSize(module.ptr(), &size);
  if (name == nullptr) return Miss();
  const std::string_view view(name, size);
  if (view != "torch" && view.substr(0, 6) != "torch.") return false;
  if (torch_types_.size() < 8) {
    torch_types_.push_back(
        py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(type)));
  }
  return true;
}

std::optional<v1::DType> CudaFastPath::DTypeOfTorch(PyObject* dtype) const {
  for (const auto& [known, number] : dtypes_) {
    if (known.ptr() == dtype) return number;
  }
  return std::nullopt;
}

bool CudaFastPath::ReadOperand(py::handle tensor, Operand& operand) {
  PyObject* const t = tensor.ptr();
  if (!IsTorchType(Py_TYPE(t))) return false;
  py::object dtype = Steal(PyObject_GetAttr(t, N().dtype));
  if (!dtype) return Miss();
  const std::optional<v1::DType> number = DTypeOfTorch(dtype.ptr());
  if (!number) return false;
  operand.dtype = *number;
  operand.element_bytes = *number == v1::DTYPE_BF16 ? 2 : 4;
  py::object shape = Steal(PyObject_GetAttr(t, N().shape));
  if (!shape) return Miss();
  if (!PyTuple_Check(shape.ptr())) return false;
  const Py_ssize_t rank = PyTuple_GET_SIZE(shape.ptr());
  if (rank != 2 && rank != 3) return false;
  py::object strides = Steal(PyObject_CallMethodNoArgs(t, N().stride));
  if (!strides) return Miss();
  if (!PyTuple_Check(strides.ptr()) ||
      PyTuple_GET_SIZE(strides.ptr()) != rank) {
    return false;
  }
  operand.rank = static_cast<int>(rank);
  for (Py_ssize_t i = 0; i < rank; ++i) {
    if (!AsInt64(PyTuple_GET_ITEM(shape.ptr(), i), operand.shape[i]) ||
        !AsInt64(PyTuple_GET_ITEM(strides.ptr(), i), operand.strides[i]) ||
        operand.shape[i] < 1 || operand.strides[i] < 0) {
      return false;
    }
  }
  py::object offset = Steal(PyObject_CallMethodNoArgs(t, N().storage_offset));
  if (!offset) return Miss();
  if (!AsInt64(offset.ptr(), operand.storage_offset) ||
      operand.storage_offset < 0) {
    return false;
  }
  py::object data = Steal(PyObject_CallMethodNoArgs(t, N().data_ptr));
  if (!data) return Miss();
  uint64_t address = 0;
  if (!AsUint64(data.ptr(), address) || address == 0) return false;
  operand.data = static_cast<uintptr_t>(address);
  return true;
}

std::optional<uint64_t> CudaFastPath::BufferId(uintptr_t address) {
  if (buffer_id_.is_none()) return CudaBufferId(address);
  py::object id = Steal(PyObject_CallOneArg(
      buffer_id_.ptr(), Steal(PyLong_FromUnsignedLongLong(address)).ptr()));
  uint64_t value = 0;
  if (!id || !AsUint64(id.ptr(), value)) {
    PyErr_Clear();
    return std::nullopt;
  }
  return value;
}

bool CudaFastPath::Look(PyObject* storages, const Operand& operand, Ref& ref) {
  const uintptr_t address = operand.storage();
  py::object key = Steal(PyLong_FromUnsignedLongLong(address));
  if (!key) return Miss();
  // Entries are (region id, storage's offset in the region, region bytes,
  // device, buffer id or None): _CudaRegions._cuda_ref.
  PyObject* entry = PyDict_GetItemWithError(storages, key.ptr());  // borrowed
  if (entry == nullptr) return Miss();
  if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 5) return false;
  PyObject* region_id = PyTuple_GET_ITEM(entry, 0);
  PyObject* device = PyTuple_GET_ITEM(entry, 3);
  PyObject* buffer_id = PyTuple_GET_ITEM(entry, 4);
  uint64_t storage_offset = 0, region_bytes = 0, cached_id = 0;
  if (!PyUnicode_Check(region_id) || !PyLong_Check(device) ||
      !AsUint64(PyTuple_GET_ITEM(entry, 1), storage_offset) ||
      !AsUint64(PyTuple_GET_ITEM(entry, 2), region_bytes) ||
      // No buffer id: the freed bytes vouch for it, on every product.
      buffer_id == Py_None || !AsUint64(buffer_id, cached_id)) {
    return false;
  }
  Py_ssize_t size = 0;
  const char* id = PyUnicode_AsUTF8AndSize(region_id, &size);
  if (id == nullptr) return Miss();
  ref.region_id.assign(id, size);
  ref.device = py::reinterpret_borrow<py::object>(device);
  ref.device_index = PyLong_AsLong(device);
  if (ref.device_index == -1 && PyErr_Occurred()) return Miss();
  ref.offset = storage_offset + static_cast<uint64_t>(operand.storage_offset *
                                                      operand.element_bytes);
  if (ref.offset + operand.extent_bytes() > region_bytes) return false;
  // Last: `entry` may be gone once Python code ran (a buffer-id stand-in).
  const std::optional<uint64_t> current = BufferId(address);
  return current.has_value() && *current == cached_id;
}

long CudaFastPath::PeekDevice(PyObject* storages,  // NOLINT(runtime/int)
                              const Operand& operand) {
  py::object key = Steal(PyLong_FromUnsignedLongLong(operand.storage()));
  PyObject* entry =  // borrowed
      key ? PyDict_GetItemWithError(storages, key.ptr()) : nullptr;
  if (entry == nullptr) {
    PyErr_Clear();
    return -1;
  }
  if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 5 ||
      !PyLong_Check(PyTuple_GET_ITEM(entry, 3))) {
    return -1;
  }
  const long index = PyLong_AsLong(PyTuple_GET_ITEM(entry, 3));  // NOLINT
  if (index == -1) PyErr_Clear();
  return index;
}

bool CudaFastPath::HasStreamFailures() {
  if (ring_ != nullptr) return ring_->HasStreamFailures();
  py::object has =
      Steal(PyObject_CallMethod(queue_.ptr(), "has_stream_failures", nullptr));
  if (!has) {
    PyErr_Clear();
    return true;  // the Python path asks again
  }
  return PyObject_IsTrue(has.ptr()) != 0;
}

uint64_t CudaFastPath::Queue(v1::MatmulRequest request, uintptr_t stream,
                             double timeout_s, uint64_t tag) {
  if (ring_ != nullptr) {
    return ring_->QueueRequestOnStream(std::move(request), stream, timeout_s,
                                       tag);
  }
  return queue_
      .attr("queue_request_on_stream")(py::bytes(request.SerializeAsString()),
                                       stream, timeout_s, tag)
      .cast<uint64_t>();
}

py::object CudaFastPath::Matmul(py::handle client, py::handle const* args) {
  PyObject* const out_arg = args[2].ptr();
  PyObject* const transpose_b = args[3].ptr();
  PyObject* const transpose_a = args[4].ptr();
  PyObject* const out_dtype = args[7].ptr();
  PyObject* const timeout = args[8].ptr();
  PyObject* const stream = args[9].ptr();
  auto miss = [this] {
    PyErr_Clear();
    ++misses_;
    return py::object(py::none());
  };
  // The plain values first: anything but the usual forms goes the Python
  // way, which converts or refuses them.
  if ((transpose_a != Py_True && transpose_a != Py_False) ||
      (transpose_b != Py_True && transpose_b != Py_False)) {
    return miss();
  }
  double alpha = 0, beta = 0;
  if (!AsDouble(args[5].ptr(), alpha) || !AsDouble(args[6].ptr(), beta)) {
    return miss();
  }
  const bool has_out = out_arg != Py_None;
  if (!has_out && beta != 0.0) return miss();  // a ValueError there
  std::optional<v1::DType> requested;
  if (out_dtype != Py_None) {
    requested = DTypeOfTorch(out_dtype);
    if (!requested && PyLong_CheckExact(out_dtype)) {
      const long number = PyLong_AsLong(out_dtype);  // NOLINT(runtime/int)
      if (number == v1::DTYPE_BF16 || number == v1::DTYPE_FP32) {
        requested = static_cast<v1::DType>(number);
      }
    }
    if (!requested) return miss();
  }
  double timeout_s = 0;
  {
    py::object seconds = py::reinterpret_borrow<py::object>(timeout);
    if (timeout == Py_None) {
      seconds = Steal(PyObject_GetAttr(client.ptr(), N().timeout));
      if (!seconds) return miss();
    }
    if (seconds.is_none()) {
      timeout_s = 365 * 24 * 3600.0;  // _transports._NO_TIMEOUT_SECONDS
    } else if (!AsDouble(seconds.ptr(), timeout_s)) {
      return miss();
    }
  }
  // A stream-ordered failure raises there first.
  if (HasStreamFailures()) return miss();

  Operand a, b, c;
  if (!ReadOperand(args[0], a) || !ReadOperand(args[1], b)) return miss();
  if (has_out) {
    if (!ReadOperand(args[2], c)) return miss();
    if (requested && *requested != c.dtype) return miss();
  }
  const v1::DType dtype =
      has_out ? c.dtype : requested.value_or(v1::DTYPE_BF16);

  py::object out;
  py::object device_object;  // a.device, for a device not seen yet
  if (has_out) {
    out = py::reinterpret_borrow<py::object>(out_arg);
  } else {
    // _operands._output_shape
    std::vector<int64_t> shape = {
        transpose_a == Py_True ? a.shape[a.rank - 1] : a.shape[a.rank - 2],
        transpose_b == Py_True ? b.shape[b.rank - 2] : b.shape[b.rank - 1]};
    if (a.rank == 3 || b.rank == 3) {
      shape.insert(shape.begin(), std::max(a.rank == 3 ? a.shape[0] : 1,
                                           b.rank == 3 ? b.shape[0] : 1));
    }
    // The device of a's cached storage, looked at without the lock only to
    // pick where out goes: everything is checked under it below.
    py::object storages = Steal(PyObject_GetAttr(client.ptr(), N().storages));
    if (!storages || !PyDict_Check(storages.ptr())) return miss();
    const long index = PeekDevice(storages.ptr(), a);  // NOLINT(runtime/int)
    if (index < 0) return miss();
    PyObject* device = nullptr;
    if (static_cast<size_t>(index) < devices_.size() && devices_[index]) {
      device = devices_[index].ptr();
    } else {
      device_object = Steal(PyObject_GetAttr(args[0].ptr(), N().device));
      if (!device_object) return miss();
      device = device_object.ptr();
    }
    out = Empty(shape, dtype, device);
    if (!out) return miss();
    c.rank = static_cast<int>(shape.size());
    int64_t dense = 1;
    for (int i = c.rank; i-- > 0;) {
      c.shape[i] = shape[i];
      c.strides[i] = dense;
      dense *= shape[i];
    }
    c.dtype = dtype;
    c.element_bytes = dtype == v1::DTYPE_BF16 ? 2 : 4;
    py::object data = Steal(PyObject_CallMethodNoArgs(out.ptr(), N().data_ptr));
    uint64_t address = 0;
    if (!data || !AsUint64(data.ptr(), address) || address == 0) {
      return miss();
    }
    c.data = static_cast<uintptr_t>(address);
  }

  // The Client's caches, as _prepare_cuda reads them under its lock.
  Ref ra, rb, rc;
  {
    LockHolder hold(lock_acquire_, lock_release_);
    py::object closed = Steal(PyObject_GetAttr(client.ptr(), N().closed));
    if (!closed || PyObject_IsTrue(closed.ptr()) != 0) return miss();
    py::object retired = Steal(PyObject_GetAttr(client.ptr(), N().retired));
    if (!retired || PyObject_Length(retired.ptr()) != 0) return miss();
    py::object storages = Steal(PyObject_GetAttr(client.ptr(), N().storages));
    if (!storages || !PyDict_Check(storages.ptr())) return miss();
    if (!Look(storages.ptr(), a, ra) || !Look(storages.ptr(), b, rb) ||
        !Look(storages.ptr(), c, rc)) {
      return miss();
    }
    if (ra.device_index != rb.device_index ||
        ra.device_index != rc.device_index) {
      return miss();
    }
    // _check_freed_cuda_memory would look at torch's freed bytes now.
    py::object unidentified =
        Steal(PyObject_GetAttr(client.ptr(), N().unidentified));
    if (!unidentified) return miss();
    if (PySequence_Contains(unidentified.ptr(), ra.device.ptr()) != 0) {
      return miss();
    }
    py::object next_check =
        Steal(PyObject_GetAttr(client.ptr(), N().next_check));
    if (!next_check || !PyDict_Check(next_check.ptr())) return miss();
    PyObject* due = PyDict_GetItemWithError(next_check.ptr(), ra.device.ptr());
    double due_s = 0;
    if (due == nullptr || !PyFloat_Check(due)) return miss();
    due_s = PyFloat_AS_DOUBLE(due);
    if (!(MonotonicSeconds() < due_s)) return miss();
  }
  if (device_object && ra.device_index >= 0 && ra.device_index < 64) {
    if (devices_.size() <= static_cast<size_t>(ra.device_index)) {
      devices_.resize(ra.device_index + 1);
    }
    devices_[ra.device_index] = device_object;
  }

  py::object raw_stream =
      stream == Py_None
          ? Steal(PyObject_CallOneArg(current_stream_.ptr(), ra.device.ptr()))
          : Steal(PyObject_GetAttr(stream, N().cuda_stream));
  uint64_t stream_handle = 0;
  if (!raw_stream || !AsUint64(raw_stream.ptr(), stream_handle)) {
    return miss();
  }
  // From here on the product is this path's: errors raise.
  py::object number = Steal(PyIter_Next(numbers_.ptr()));
  if (!number) {
    if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_RuntimeError, "product numbers ran out");
    }
    throw py::error_already_set();
  }
  const uint64_t tag = number.cast<uint64_t>();

  v1::MatmulRequest request;
  SetRegionTensor(ra.region_id, ra.offset, absl::MakeConstSpan(a.shape, a.rank),
                  absl::MakeConstSpan(a.strides, a.rank), a.dtype,
                  request.mutable_a());
  SetRegionTensor(rb.region_id, rb.offset, absl::MakeConstSpan(b.shape, b.rank),
                  absl::MakeConstSpan(b.strides, b.rank), b.dtype,
                  request.mutable_b());
  SetRegionTensor(rc.region_id, rc.offset, absl::MakeConstSpan(c.shape, c.rank),
                  absl::MakeConstSpan(c.strides, c.rank), c.dtype,
                  request.mutable_c());
  request.set_transpose_a(transpose_a == Py_True);
  request.set_transpose_b(transpose_b == Py_True);
  request.set_alpha(static_cast<float>(alpha));
  request.set_beta(static_cast<float>(beta));
  request.set_out_dtype(dtype);
  request.set_session_id(session_id_);
  Queue(std::move(request), static_cast<uintptr_t>(stream_handle), timeout_s,
        tag);
  ++hits_;
  // As Client.matmul after a stream-ordered product: what earlier
  // products gave back.
  if (PyObject_Length(retired_on_answer_.ptr()) > 0) {
    client.attr("_release_answered")();
  }
  if (PyObject_Length(retired_done_.ptr()) > 0) {
    client.attr("_unregister_retired")();
  }
  return out;
}

py::object CudaFastPath::Empty(const std::vector<int64_t>& shape,
                               v1::DType dtype, PyObject* device) {
  py::tuple dims(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) dims[i] = py::int_(shape[i]);
  PyObject* dtype_object = nullptr;
  for (const auto& [known, number] : dtypes_) {
    if (number == dtype) dtype_object = known.ptr();
  }
  if (dtype_object == nullptr) return py::object();
  PyObject* call_args[] = {dims.ptr(), device, dtype_object};
  return Steal(
      PyObject_Vectorcall(empty_.ptr(), call_args, 1, N().empty_kwnames));
}

namespace {

constexpr char kCapsuleName[] = "matmul_client._native.CudaFastPath";

// CudaFastPath.matmul without pybind11's argument dispatch (a call's
// largest fixed cost): a builtin bound to a capsule of the CudaFastPath,
// which holds a reference to its Python object.
PyObject* FastMatmul(PyObject* capsule, PyObject* const* args,
                     Py_ssize_t nargs) {
  if (nargs != 11) {
    PyErr_Format(PyExc_TypeError,
                 "matmul(client, a, b, out, transpose_b, transpose_a, alpha, "
                 "beta, out_dtype, timeout, stream): 11 arguments, got %zd",
                 nargs);
    return nullptr;
  }
  auto* path =
      static_cast<CudaFastPath*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (path == nullptr) return nullptr;
  static_assert(sizeof(py::handle) == sizeof(PyObject*));
  try {
    return path
        ->Matmul(py::handle(args[0]),
                 reinterpret_cast<const py::handle*>(args + 1))
        .release()
        .ptr();
  } catch (py::error_already_set& error) {
    error.restore();
  } catch (py::builtin_exception& error) {
    error.set_error();
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
  }
  return nullptr;
}

PyMethodDef kFastMatmulDef = {
    "matmul",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&FastMatmul)),
    METH_FASTCALL,
    "matmul(client, a, b, out, transpose_b, transpose_a, alpha, beta, "
    "out_dtype, timeout, stream) -> out, or None where Client.matmul must "
    "take its Python path (nothing was sent then)."};

}  // namespace

void BindCudaFastPath(py::module_& module) {
  py::class_<CudaFastPath>(
      module, "CudaFastPath",
      "Client.matmul's common case for cached CUDA storages, in C++ "
      "(cuda_fast_path.h).")
      .def(py::init<py::object, std::string, py::object, py::object, py::object,
                    py::object, py::object, py::object, py::dict, py::object>(),
           py::arg("queue"), py::arg("session_id"), py::arg("lock"),
           py::arg("numbers"), py::arg("retired_done"),
           py::arg("retired_on_answer"), py::arg("current_stream"),
           py::arg("empty"), py::arg("dtypes"),
           py::arg("buffer_id") = py::none())
      .def_property_readonly(
          "matmul",
          [](py::object self) {
            auto* path = self.cast<CudaFastPath*>();
            py::object capsule =
                Steal(PyCapsule_New(path, kCapsuleName, [](PyObject* capsule) {
                  Py_XDECREF(
                      static_cast<PyObject*>(PyCapsule_GetContext(capsule)));
                }));
            if (!capsule || PyCapsule_SetContext(capsule.ptr(),
                                                 self.inc_ref().ptr()) != 0) {
              throw py::error_already_set();
            }
            py::object bound =
                Steal(PyCFunction_New(&kFastMatmulDef, capsule.ptr()));
            if (!bound) throw py::error_already_set();
            return bound;
          },
          "The fast call as a builtin (keep it: each read makes one).")
      .def_property_readonly("hits", &CudaFastPath::hits)
      .def_property_readonly("misses", &CudaFastPath::misses);
}

}  // namespace matmul::python
