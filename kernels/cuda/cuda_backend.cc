#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checked_math.h"
#include "common/gemm/matrix_layout.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_ops.h"
#include "kernels/gemm_batch.h"

namespace matmul {
namespace {

using cuda::CudaStatus;
using cuda::DeviceBuffer;
using cuda::StreamBuffer;

// Strides a kernel sees for a classified operand (batch stride kept).
Strides Normalized(const MatrixLayout& c, int64_t batch_stride) {
  if (c.order == MatrixOrder::kColMajor) return {batch_stride, 1, c.ld};
  return {batch_stride, c.ld, 1};
}

// Strides of a dense copy in the given layout.
Strides Dense(MatrixOrder layout, int64_t rows, int64_t cols, bool broadcast) {
  const int64_t batch = broadcast ? 0 : rows * cols;
  if (layout == MatrixOrder::kColMajor) return {batch, 1, rows};
  return {batch, cols, 1};
}

const char* EntryPointer(const void* data, const void* const* pointers,
                         int64_t batch_stride, int64_t b, size_t element) {
  if (pointers != nullptr) return static_cast<const char*>(pointers[b]);
  return static_cast<const char*>(data) +
         b * batch_stride * static_cast<int64_t>(element);
}

// True when the device can address `pointer` directly: device, managed or
// registered host memory. Plain pageable host memory is not.
bool DeviceAddressable(const void* pointer) {
  cudaPointerAttributes attributes;
  if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
    cudaGetLastError();  // clear the error so later calls start clean
    return false;
  }
  return attributes.type != cudaMemoryTypeUnregistered;
}

// Copies entry by entry into a dense device copy in `layout` (row-major for
// a strided source). Sources may be host or device memory (unified
// addressing picks the copy direction); a strided source is packed on the
// host, or gathered by a kernel when the device can read it.
absl::Status StageIn(const void* data, const void* const* pointers,
                     const Strides& strides, const MatrixLayout& c,
                     int64_t rows, int64_t cols, int64_t entries,
                     size_t element, char* device, cudaStream_t stream,
                     std::vector<char>& pack) {
  const size_t matrix_bytes = rows * cols * element;
  for (int64_t b = 0; b < entries; ++b) {
    const char* src = EntryPointer(data, pointers, strides.batch, b, element);
    char* dst = device + b * matrix_bytes;
    switch (c.order) {
      case MatrixOrder::kRowMajor:
        RETURN_IF_ERROR(CudaStatus(
            cudaMemcpy2DAsync(dst, cols * element, src, c.ld * element,
                              cols * element, rows, cudaMemcpyDefault, stream),
            "cudaMemcpy2DAsync(staging in)"));
        break;
      case MatrixOrder::kColMajor:
        RETURN_IF_ERROR(CudaStatus(
            cudaMemcpy2DAsync(dst, rows * element, src, c.ld * element,
                              rows * element, cols, cudaMemcpyDefault, stream),
            "cudaMemcpy2DAsync(staging in)"));
        break;
      case MatrixOrder::kStrided:
        if (DeviceAddressable(src)) {
          RETURN_IF_ERROR(cuda::CopyMatrix(
              {src, nullptr, {0, strides.row, strides.col}},
              {dst, nullptr, Dense(MatrixOrder::kRowMajor, rows, cols, true)},
              1, rows, cols, static_cast<int>(element), stream));
          break;
        }
        pack.resize(matrix_bytes);
        for (int64_t i = 0; i < rows; ++i) {
          for (int64_t j = 0; j < cols; ++j) {
            std::memcpy(&pack[(i * cols + j) * element],
                        src + (i * strides.row + j * strides.col) * element,
                        element);
          }
        }
        // From pageable memory the call returns once `pack` has been
        // consumed, so it may be refilled for the next entry.
        RETURN_IF_ERROR(
            CudaStatus(cudaMemcpyAsync(dst, pack.data(), matrix_bytes,
                                       cudaMemcpyHostToDevice, stream),
                       "cudaMemcpyAsync(host to device)"));
        break;
    }
  }
  return absl::OkStatus();
}

// The reverse of StageIn for C: host or device destinations.
absl::Status StageOut(const GemmProblem& p, const MatrixLayout& c,
                      const char* device, cudaStream_t stream,
                      std::vector<char>& pack) {
  const size_t element = DTypeSize(p.c_dtype);
  const size_t matrix_bytes = p.m * p.n * element;
  for (int64_t b = 0; b < p.batch; ++b) {
    char* dst = const_cast<char*>(
        EntryPointer(p.c.data, const_cast<const void* const*>(p.c.pointers),
                     p.c.strides.batch, b, element));
    const char* src = device + b * matrix_bytes;
    switch (c.order) {
      case MatrixOrder::kRowMajor:
        RETURN_IF_ERROR(CudaStatus(
            cudaMemcpy2DAsync(dst, c.ld * element, src, p.n * element,
                              p.n * element, p.m, cudaMemcpyDefault, stream),
            "cudaMemcpy2DAsync(staging out)"));
        break;
      case MatrixOrder::kColMajor:
        RETURN_IF_ERROR(CudaStatus(
            cudaMemcpy2DAsync(dst, c.ld * element, src, p.m * element,
                              p.m * element, p.n, cudaMemcpyDefault, stream),
            "cudaMemcpy2DAsync(staging out)"));
        break;
      case MatrixOrder::kStrided:
        if (DeviceAddressable(dst)) {
          RETURN_IF_ERROR(cuda::CopyMatrix(
              {src, nullptr, Dense(MatrixOrder::kRowMajor, p.m, p.n, true)},
              {dst, nullptr, {0, p.c.strides.row, p.c.strides.col}}, 1, p.m,
              p.n, static_cast<int>(element), stream));
          break;
        }
        pack.resize(matrix_bytes);
        RETURN_IF_ERROR(
            CudaStatus(cudaMemcpyAsync(pack.data(), src, matrix_bytes,
                                       cudaMemcpyDeviceToHost, stream),
                       "cudaMemcpyAsync(device to host)"));
        RETURN_IF_ERROR(
            CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
        for (int64_t i = 0; i < p.m; ++i) {
          for (int64_t j = 0; j < p.n; ++j) {
            std::memcpy(
                dst + (i * p.c.strides.row + j * p.c.strides.col) * element,
                &pack[(i * p.n + j) * element], element);
          }
        }
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the error so later calls start clean
    return 0;
  }
  return count;
}

absl::Status ValidateForCuda(const GemmProblem& p) {
  if (p.batch < 1 || p.m < 1 || p.n < 1 || p.k < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch, m, n and k must be >= 1; got batch ", p.batch,
                     ", m ", p.m, ", n ", p.n, ", k ", p.k));
  }
  int64_t product = 0;
  if (MulOverflows(p.m, p.k, &product) ||
      MulOverflows(product, p.batch, &product) ||
      MulOverflows(p.k, p.n, &product) ||
      MulOverflows(product, p.batch, &product) ||
      MulOverflows(p.m, p.n, &product) ||
      MulOverflows(product, p.batch, &product) ||
      MulOverflows(product, 4, &product)) {
    return absl::InvalidArgumentError("problem size overflows int64");
  }
  struct Operand {
    const char* name;
    const void* data;
    const void* pointers;
    Strides strides;
  };
  const Operand operands[] = {{"A", p.a.data, p.a.pointers, p.a.strides},
                              {"B", p.b.data, p.b.pointers, p.b.strides},
                              {"C", p.c.data, p.c.pointers, p.c.strides}};
  for (const Operand& x : operands) {
    if (x.data == nullptr && x.pointers == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("operand ", x.name, " has no data pointer"));
    }
    if (x.strides.batch < 0 || x.strides.row < 0 || x.strides.col < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "operand ", x.name, " has a negative stride (batch ", x.strides.batch,
          ", row ", x.strides.row, ", col ", x.strides.col, ")"));
    }
  }
  if (p.batch > 1 && p.c.pointers == nullptr && p.c.strides.batch == 0) {
    return absl::InvalidArgumentError(
        "output C cannot have batch stride 0 (every batch entry would write "
        "the same matrix)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    const CudaBackendOptions& options) {
  if (options.streams < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("streams is ", options.streams, "; expected >= 1"));
  }
  if (!(options.serial_min_gflop_per_sm > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("serial_min_gflop_per_sm is ",
                     options.serial_min_gflop_per_sm, "; expected > 0"));
  }
  const int count = CudaDeviceCount();
  if (count == 0) {
    return absl::UnavailableError("no CUDA device or driver available");
  }
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", options.device, " does not exist (", count,
                     " present)"));
  }
  ASSIGN_OR_RETURN(cuda::ScopedDevice scoped,
                   cuda::ScopedDevice::Create(options.device));
  cudaDeviceProp prop;
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&prop, options.device),
                             "cudaGetDeviceProperties"));
  DeviceInfo info;
  info.name = prop.name;
  info.compute_capability = absl::StrCat(prop.major, ".", prop.minor);
  info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info.multiprocessors = prop.multiProcessorCount;
  const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  info.uuid = absl::StrFormat(
      "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%"
      "02x",
      u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
      u[12], u[13], u[14], u[15]);

  cuda::SelectorOptions selector_options;
  selector_options.device = options.device;
  selector_options.cache_path = options.tuning_cache_path;
  selector_options.background_tuning = options.background_tuning;
  selector_options.max_shared_bytes = options.max_shared_bytes;
  selector_options.use_own_kernels = options.use_own_kernels;
  selector_options.use_cublaslt = options.use_cublaslt;
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::GemmSelector> selector,
                   cuda::GemmSelector::Create(selector_options));
  std::vector<std::unique_ptr<Lane>> lanes;
  for (int i = 0; i < options.streams; ++i) {
    ASSIGN_OR_RETURN(cuda::CudaStream stream, cuda::CudaStream::Create());
    ASSIGN_OR_RETURN(cuda::CudaEvent start, cuda::CudaEvent::Create());
    ASSIGN_OR_RETURN(cuda::CudaEvent stop, cuda::CudaEvent::Create());
    ASSIGN_OR_RETURN(cuda::CudaEvent prepared, cuda::CudaEvent::Create());
    auto lane =
        std::make_unique<Lane>(Lane{std::move(stream), std::move(start),
                                    std::move(stop), std::move(prepared)});
    // The families' workspace up front: a cudaMalloc inside the first timed
    // product would count as kernel time (and synchronise the device).
    RETURN_IF_ERROR(lane->workspace.Reserve(selector->max_workspace_bytes()));
    lanes.push_back(std::move(lane));
  }
  ASSIGN_OR_RETURN(cuda::CudaStream serial_stream, cuda::CudaStream::Create());
  auto backend = std::unique_ptr<CudaBackend>(
      new CudaBackend(options, std::move(info), std::move(selector),
                      std::move(lanes), std::move(serial_stream)));
  CudaBackend* raw = backend.get();
  backend->selector_->SetTuningGuard([raw] { return raw->HoldAllLanes(); });
  if (options.test_only_memory_headroom_bytes > 0) {
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    RETURN_IF_ERROR(CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes),
                               "cudaMemGetInfo"));
    const auto headroom =
        static_cast<size_t>(options.test_only_memory_headroom_bytes);
    if (free_bytes > headroom) {
      RETURN_IF_ERROR(
          backend->test_only_ballast_.Reserve(free_bytes - headroom));
    }
  }
  return backend;
}

absl::Status CudaBackend::LaunchProduct(const cuda::KernelChoice& choice,
                                        const GemmProblem& problem,
                                        cudaStream_t stream,
                                        cuda::DeviceBuffer& workspace) {
  if (options_.test_only_inject_fault_after > 0 &&
      launches_.fetch_add(1, std::memory_order_relaxed) + 1 ==
          options_.test_only_inject_fault_after) {
    return cuda::LaunchOutOfRangeWrite(stream);
  }
  return selector_->RunChoice(choice, problem, stream, workspace);
}

CudaBackend::CudaBackend(const CudaBackendOptions& options, DeviceInfo info,
                         std::unique_ptr<cuda::GemmSelector> selector,
                         std::vector<std::unique_ptr<Lane>> lanes,
                         cuda::CudaStream serial_stream)
    : options_(options),
      info_(std::move(info)),
      selector_(std::move(selector)),
      lanes_(std::move(lanes)),
      serial_stream_(std::move(serial_stream)) {
  for (const std::unique_ptr<Lane>& lane : lanes_) {
    free_lanes_.push_back(lane.get());
  }
}

CudaBackend::~CudaBackend() {
  // Stop background tuning before the buffers and streams go away.
  selector_.reset();
}

class CudaBackend::LaneLease {
 public:
  LaneLease(CudaBackend& backend, Lane* lane, cuda::ScopedDevice scoped)
      : backend_(&backend), lane_(lane), scoped_(std::move(scoped)) {}
  LaneLease(LaneLease&& other) noexcept
      : backend_(std::exchange(other.backend_, nullptr)),
        lane_(std::exchange(other.lane_, nullptr)),
        scoped_(std::move(other.scoped_)) {}
  LaneLease& operator=(LaneLease&&) = delete;
  ~LaneLease() {
    if (backend_ == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(backend_->lanes_mu_);
      backend_->free_lanes_.push_back(lane_);
    }
    backend_->lane_freed_.notify_one();
  }
  Lane& lane() const { return *lane_; }

 private:
  CudaBackend* backend_;
  Lane* lane_;
  cuda::ScopedDevice scoped_;
};

absl::StatusOr<CudaBackend::LaneLease> CudaBackend::AcquireLane() {
  ASSIGN_OR_RETURN(cuda::ScopedDevice scoped,
                   cuda::ScopedDevice::Create(options_.device));
  std::unique_lock<std::mutex> lock(lanes_mu_);
  lane_freed_.wait(lock, [this] { return !free_lanes_.empty(); });
  Lane* lane = free_lanes_.back();
  free_lanes_.pop_back();
  return LaneLease(*this, lane, std::move(scoped));
}

std::shared_ptr<void> CudaBackend::HoldAllLanes() {
  auto held = std::make_shared<std::vector<LaneLease>>();
  for (size_t i = 0; i < lanes_.size(); ++i) {
    absl::StatusOr<LaneLease> lease = AcquireLane();
    if (!lease.ok()) return nullptr;
    held->push_back(*std::move(lease));
  }
  return held;
}

bool CudaBackend::FillsDevice(const GemmProblem& p) const {
  return p.batch * p.m * p.n >=
         int64_t{128} * 128 * std::max(1, info_.multiprocessors);
}

bool CudaBackend::RunsSerially(const GemmProblem& p) const {
  return p.flops() >= options_.serial_min_gflop_per_sm * 1e9 *
                          std::max(1, info_.multiprocessors);
}

int CudaBackend::MaxUsefulBatch(const GemmProblem& problem) const {
  return FillsDevice(problem) ? 1 : 0;
}

absl::StatusOr<GemmRunInfo> CudaBackend::RunTimed(const GemmProblem& problem,
                                                  Lane& lane,
                                                  bool after_lane_work,
                                                  const AfterProduct& then) {
  // Resolved before the start event, so that a first call's plan building
  // is not counted as kernel time.
  ASSIGN_OR_RETURN(cuda::KernelChoice choice, selector_->Resolve(problem));
  if (RunsSerially(problem)) {
    return RunSerial(choice, problem, lane, after_lane_work, then);
  }
  cudaStream_t stream = lane.stream.get();
  RETURN_IF_ERROR(lane.start.Record(stream));
  RETURN_IF_ERROR(LaunchProduct(choice, problem, stream, lane.workspace));
  RETURN_IF_ERROR(lane.stop.Record(stream));
  if (then) {
    RETURN_IF_ERROR(then(stream));
    RETURN_IF_ERROR(lane.stream.Synchronize());
  } else {
    RETURN_IF_ERROR(lane.stop.Synchronize());
  }
  GemmRunInfo info;
  info.kernel = choice.name;
  ASSIGN_OR_RETURN(info.kernel_seconds,
                   cuda::CudaEvent::ElapsedSeconds(lane.start, lane.stop));
  return info;
}

absl::StatusOr<GemmRunInfo> CudaBackend::RunSerial(
    const cuda::KernelChoice& choice, const GemmProblem& problem, Lane& lane,
    bool after_lane_work, const AfterProduct& then) {
  cudaStream_t serial = serial_stream_.get();
  std::shared_ptr<cuda::CudaEvent> from;
  std::shared_ptr<cuda::CudaEvent> to;
  if (after_lane_work) {
    RETURN_IF_ERROR(lane.prepared.Record(lane.stream.get()));
  }
  {
    std::lock_guard<std::mutex> lock(serial_mu_);
    if (after_lane_work) {
      RETURN_IF_ERROR(
          CudaStatus(cudaStreamWaitEvent(serial, lane.prepared.get(), 0),
                     "cudaStreamWaitEvent"));
    }
    // One event between consecutive products, not a start and a stop: on
    // the H200 an event pair around each of back-to-back 5120x512x2048
    // products (20.4 us alone) made them take 32.4 us each, one event 25.9
    // (tests/gpu/service/launch_gaps.py). While the previous product is
    // still pending, its end is this one's start; on an idle stream the
    // product gets a start event of its own.
    from = last_serial_mark_;
    if (from == nullptr || cudaEventQuery(from->get()) != cudaErrorNotReady) {
      ASSIGN_OR_RETURN(from, serial_marks_.Take());
      RETURN_IF_ERROR(from->Record(serial));
    }
    ASSIGN_OR_RETURN(to, serial_marks_.Take());
    RETURN_IF_ERROR(LaunchProduct(choice, problem, serial, lane.workspace));
    RETURN_IF_ERROR(to->Record(serial));
    last_serial_mark_ = to;
  }
  if (then) {
    cudaStream_t stream = lane.stream.get();
    RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(stream, to->get(), 0),
                               "cudaStreamWaitEvent"));
    RETURN_IF_ERROR(then(stream));
    RETURN_IF_ERROR(lane.stream.Synchronize());  // after `to`, by the wait
  } else {
    RETURN_IF_ERROR(to->Synchronize());
  }
  GemmRunInfo info;
  info.kernel = choice.name;
  ASSIGN_OR_RETURN(info.kernel_seconds,
                   cuda::CudaEvent::ElapsedSeconds(*from, *to));
  return info;
}

absl::StatusOr<GemmRunInfo> CudaBackend::RunHost(const GemmProblem& p) {
  RETURN_IF_ERROR(ValidateForCuda(p));
  ASSIGN_OR_RETURN(LaneLease lease, AcquireLane());
  Lane& lane = lease.lane();
  cudaStream_t stream = lane.stream.get();
  const MatrixLayout ca = ClassifyLayout(p.a.strides, p.m, p.k);
  const MatrixLayout cb = ClassifyLayout(p.b.strides, p.k, p.n);
  const MatrixLayout cc = ClassifyLayout(p.c.strides, p.m, p.n);
  const bool a_broadcast =
      p.batch > 1 && p.a.pointers == nullptr && p.a.strides.batch == 0;
  const bool b_broadcast =
      p.batch > 1 && p.b.pointers == nullptr && p.b.strides.batch == 0;
  const int64_t a_entries = a_broadcast ? 1 : p.batch;
  const int64_t b_entries = b_broadcast ? 1 : p.batch;
  const size_t c_element = DTypeSize(p.c_dtype);
  RETURN_IF_ERROR(lane.a_buffer.Reserve(a_entries * p.m * p.k * 2));
  RETURN_IF_ERROR(lane.b_buffer.Reserve(b_entries * p.k * p.n * 2));
  RETURN_IF_ERROR(lane.c_buffer.Reserve(p.batch * p.m * p.n * c_element));

  // Dense device copies keep a row- or column-major source's layout (a
  // transposed operand stays transposed: the kernels take either); a
  // strided source becomes row-major.
  auto device_layout = [](const MatrixLayout& c) {
    return c.order == MatrixOrder::kColMajor ? MatrixOrder::kColMajor
                                             : MatrixOrder::kRowMajor;
  };
  GemmProblem d = p;
  d.a.pointers = nullptr;
  d.b.pointers = nullptr;
  d.c.pointers = nullptr;
  d.a.data = lane.a_buffer.data();
  d.b.data = lane.b_buffer.data();
  d.c.data = lane.c_buffer.data();
  d.a.strides = Dense(device_layout(ca), p.m, p.k, a_broadcast);
  d.b.strides = Dense(device_layout(cb), p.k, p.n, b_broadcast);
  d.c.strides = Dense(device_layout(cc), p.m, p.n, false);

  std::vector<char> pack;
  RETURN_IF_ERROR(
      StageIn(p.a.data, p.a.pointers, p.a.strides, ca, p.m, p.k, a_entries, 2,
              static_cast<char*>(lane.a_buffer.data()), stream, pack));
  RETURN_IF_ERROR(
      StageIn(p.b.data, p.b.pointers, p.b.strides, cb, p.k, p.n, b_entries, 2,
              static_cast<char*>(lane.b_buffer.data()), stream, pack));
  if (p.beta != 0.0f) {
    RETURN_IF_ERROR(
        StageIn(p.c.data, const_cast<const void* const*>(p.c.pointers),
                p.c.strides, cc, p.m, p.n, p.batch, c_element,
                static_cast<char*>(lane.c_buffer.data()), stream, pack));
  }
  ASSIGN_OR_RETURN(GemmRunInfo info,
                   RunTimed(d, lane, /*after_lane_work=*/true));
  RETURN_IF_ERROR(StageOut(
      p, cc, static_cast<const char*>(lane.c_buffer.data()), stream, pack));
  RETURN_IF_ERROR(lane.stream.Synchronize());
  return info;
}

absl::StatusOr<GemmRunInfo> CudaBackend::RunDevice(const GemmProblem& p) {
  RETURN_IF_ERROR(ValidateForCuda(p));
  ASSIGN_OR_RETURN(LaneLease lease, AcquireLane());
  return RunDeviceOnLane(p, lease.lane(), /*after_lane_work=*/false);
}

absl::StatusOr<GemmRunInfo> CudaBackend::RunBatch(
    absl::Span<const GemmProblem* const> problems, bool on_device) {
  if (problems.size() == 1 || !on_device) {
    return GemmBackend::RunBatch(problems, on_device);
  }
  // A product with a wave of 128x128 tiles of its own keeps the GPU busy
  // alone: batching buys nothing, so each runs as it would unbatched (with
  // the kernel tuned for it), back to back on one lane. (On the H200 two
  // 5120x512x2048 products took 46 us as one pointer-array launch, 40 us
  // back to back.)
  if (FillsDevice(*problems.front())) {
    for (const GemmProblem* p : problems) RETURN_IF_ERROR(ValidateForCuda(*p));
    ASSIGN_OR_RETURN(LaneLease lease, AcquireLane());
    GemmRunInfo total;
    for (const GemmProblem* p : problems) {
      ASSIGN_OR_RETURN(GemmRunInfo one,
                       RunDeviceOnLane(*p, lease.lane(),
                                       /*after_lane_work=*/false));
      total.kernel = one.kernel;
      total.kernel_seconds += one.kernel_seconds;
    }
    return total;
  }
  ASSIGN_OR_RETURN(CombinedProblem combined,
                   CombinedProblem::Combine(problems));
  RETURN_IF_ERROR(ValidateForCuda(combined.problem()));
  ASSIGN_OR_RETURN(LaneLease lease, AcquireLane());
  Lane& lane = lease.lane();
  // The kernels read the pointer arrays on the device: copy all three into
  // the lane's buffer (from pageable memory the copy has consumed the host
  // arrays when the call returns).
  const size_t entries = combined.a_pointers().size();
  const size_t array_bytes = entries * sizeof(void*);
  RETURN_IF_ERROR(lane.pointer_arrays.Reserve(3 * array_bytes));
  std::vector<const void*> host(3 * entries);
  std::copy(combined.a_pointers().begin(), combined.a_pointers().end(),
            host.begin());
  std::copy(combined.b_pointers().begin(), combined.b_pointers().end(),
            host.begin() + entries);
  std::copy(combined.c_pointers().begin(), combined.c_pointers().end(),
            host.begin() + 2 * entries);
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(lane.pointer_arrays.data(), host.data(), 3 * array_bytes,
                      cudaMemcpyHostToDevice, lane.stream.get()),
      "cudaMemcpyAsync(pointer arrays)"));
  const auto* arrays =
      static_cast<const void* const*>(lane.pointer_arrays.data());
  GemmProblem p = combined.problem();
  p.a.pointers = arrays;
  p.b.pointers = arrays + entries;
  p.c.pointers = const_cast<void* const*>(arrays + 2 * entries);
  const std::vector<const void*>& bs = combined.b_pointers();
  const bool shared_b = std::all_of(
      bs.begin(), bs.end(), [&](const void* b) { return b == bs.front(); });
  // Stacking moves A and C twice more (gather, scatter) to read B once.
  if (shared_b && 2 * p.m * (p.k + p.n) <= p.k * p.n) {
    return RunStacked(p, bs.front(), lane);
  }
  return RunDeviceOnLane(p, lane, /*after_lane_work=*/true);  // the arrays
}

namespace {

// Entries a stacked product is padded to: its M (entries x m) is part of
// the selector's key, and a key per batch size would keep the GPU busy
// tuning. Powers of two up to 8, then multiples of 8; padding rows are
// computed and thrown away (rows of a product are independent).
int64_t StackedEntries(int64_t entries) {
  if (entries > 8) return (entries + 7) / 8 * 8;
  int64_t padded = 1;
  while (padded < entries) padded *= 2;
  return padded;
}

}  // namespace

absl::StatusOr<GemmRunInfo> CudaBackend::RunStacked(const GemmProblem& p,
                                                    const void* shared_b,
                                                    Lane& lane) {
  cudaStream_t stream = lane.stream.get();
  const int64_t entries = p.batch;
  const int64_t rows = StackedEntries(entries) * p.m;
  const int c_element = static_cast<int>(DTypeSize(p.c_dtype));
  const Strides a_dense{p.m * p.k, p.k, 1};
  const Strides c_dense{p.m * p.n, p.n, 1};
  // The lane's staging buffers (kept between calls: stream-ordered
  // allocations went back to the driver at every synchronize, and mapping
  // them again cost more than the gather).
  RETURN_IF_ERROR(lane.a_buffer.Reserve(rows * p.k * 2));
  RETURN_IF_ERROR(lane.c_buffer.Reserve(rows * p.n * c_element));
  cuda::DeviceBuffer& a_stack = lane.a_buffer;
  cuda::DeviceBuffer& c_stack = lane.c_buffer;
  // Entry e's A becomes rows [e * m, (e + 1) * m) of one row-major matrix.
  RETURN_IF_ERROR(cuda::CopyMatrix(
      {nullptr, p.a.pointers, p.a.strides, p.a.pointer_alignment},
      {a_stack.data(), nullptr, a_dense}, entries, p.m, p.k, 2, stream));
  const cuda::MutableStridedView c_entries{nullptr, p.c.pointers, p.c.strides,
                                           p.c.pointer_alignment};
  if (p.beta != 0.0f) {
    RETURN_IF_ERROR(
        cuda::CopyMatrix({nullptr, const_cast<const void* const*>(p.c.pointers),
                          p.c.strides, p.c.pointer_alignment},
                         {c_stack.data(), nullptr, c_dense}, entries, p.m, p.n,
                         c_element, stream));
  }
  GemmProblem stacked = p;
  stacked.batch = 1;
  stacked.m = rows;
  stacked.a = {.data = a_stack.data(), .strides = {0, p.k, 1}};
  stacked.b = {.data = shared_b,
               .strides = {0, p.b.strides.row, p.b.strides.col}};
  stacked.c = {.data = c_stack.data(), .strides = {0, p.n, 1}};
  // The scatter follows the product on the lane's stream, and the outputs
  // are complete when we return, as the contract says.
  ASSIGN_OR_RETURN(GemmRunInfo info,
                   RunDeviceOnLane(stacked, lane, /*after_lane_work=*/true,
                                   [&](cudaStream_t lane_stream) {
                                     return cuda::CopyMatrix(
                                         {c_stack.data(), nullptr, c_dense},
                                         c_entries, entries, p.m, p.n,
                                         c_element, lane_stream);
                                   }));
  info.kernel = absl::StrCat(info.kernel, "+stacked");
  return info;
}

absl::StatusOr<GemmRunInfo> CudaBackend::RunDeviceOnLane(
    const GemmProblem& p, Lane& lane, bool after_lane_work,
    const AfterProduct& then) {
  cudaStream_t stream = lane.stream.get();
  const MatrixLayout ca = ClassifyLayout(p.a.strides, p.m, p.k);
  const MatrixLayout cb = ClassifyLayout(p.b.strides, p.k, p.n);
  const MatrixLayout cc = ClassifyLayout(p.c.strides, p.m, p.n);
  // Pointer arrays pass through only when all three matrices use them and
  // none needs packing (the kernels' pointer-array mode); otherwise such
  // operands are gathered into dense strided batches.
  const bool all_pointers =
      p.a.pointers != nullptr && p.b.pointers != nullptr &&
      p.c.pointers != nullptr && ca.order != MatrixOrder::kStrided &&
      cb.order != MatrixOrder::kStrided && cc.order != MatrixOrder::kStrided;
  const bool gather_a = ca.order == MatrixOrder::kStrided ||
                        (p.a.pointers != nullptr && !all_pointers);
  const bool gather_b = cb.order == MatrixOrder::kStrided ||
                        (p.b.pointers != nullptr && !all_pointers);
  const bool gather_c = cc.order == MatrixOrder::kStrided ||
                        (p.c.pointers != nullptr && !all_pointers);

  GemmProblem d = p;
  StreamBuffer a_tmp, b_tmp, c_tmp;
  auto prepare_input = [&](const InputMatrix& in, const MatrixLayout& c,
                           bool gather, int64_t rows, int64_t cols,
                           InputMatrix& out,
                           StreamBuffer& tmp) -> absl::Status {
    const bool broadcast =
        p.batch > 1 && in.pointers == nullptr && in.strides.batch == 0;
    if (!gather) {
      out.strides = Normalized(c, in.strides.batch);
      return absl::OkStatus();
    }
    const int64_t entries = broadcast ? 1 : p.batch;
    ASSIGN_OR_RETURN(tmp,
                     StreamBuffer::Create(entries * rows * cols * 2, stream));
    out.data = tmp.data();
    out.pointers = nullptr;
    out.strides = Dense(MatrixOrder::kRowMajor, rows, cols, broadcast);
    return cuda::CopyMatrix({in.data, in.pointers, in.strides},
                            {tmp.data(), nullptr, out.strides}, entries, rows,
                            cols, 2, stream);
  };
  RETURN_IF_ERROR(prepare_input(p.a, ca, gather_a, p.m, p.k, d.a, a_tmp));
  RETURN_IF_ERROR(prepare_input(p.b, cb, gather_b, p.k, p.n, d.b, b_tmp));

  const int c_element = static_cast<int>(DTypeSize(p.c_dtype));
  if (gather_c) {
    ASSIGN_OR_RETURN(
        c_tmp, StreamBuffer::Create(p.batch * p.m * p.n * c_element, stream));
    d.c.data = c_tmp.data();
    d.c.pointers = nullptr;
    d.c.strides = Dense(MatrixOrder::kRowMajor, p.m, p.n, false);
    if (p.beta != 0.0f) {
      RETURN_IF_ERROR(cuda::CopyMatrix(
          {p.c.data, const_cast<const void* const*>(p.c.pointers), p.c.strides},
          {d.c.data, nullptr, d.c.strides}, p.batch, p.m, p.n, c_element,
          stream));
    }
  } else {
    d.c.strides = Normalized(cc, p.c.strides.batch);
  }

  // The scatter of a gathered C, then the caller's work, behind the product.
  const AfterProduct after = [&](cudaStream_t lane_stream) -> absl::Status {
    if (gather_c) {
      RETURN_IF_ERROR(cuda::CopyMatrix({d.c.data, nullptr, d.c.strides},
                                       {p.c.data, p.c.pointers, p.c.strides},
                                       p.batch, p.m, p.n, c_element,
                                       lane_stream));
    }
    return then ? then(lane_stream) : absl::OkStatus();
  };
  ASSIGN_OR_RETURN(
      GemmRunInfo info,
      RunTimed(d, lane, after_lane_work || gather_a || gather_b || gather_c,
               gather_c || then ? after : nullptr));
  // RunTimed waited for the kernel and what follows it; the temporaries
  // are freed in stream order, and waited for too.
  if (gather_a || gather_b || gather_c) {
    a_tmp = StreamBuffer();
    b_tmp = StreamBuffer();
    c_tmp = StreamBuffer();
    RETURN_IF_ERROR(
        CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
  }
  return info;
}

BackendGauges CudaBackend::Gauges() const {
  BackendGauges gauges;
  // cudaMemGetInfo reports on the calling thread's current device.
  absl::StatusOr<cuda::ScopedDevice> scoped =
      cuda::ScopedDevice::Create(options_.device);
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  if (scoped.ok() && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    gauges.memory_used_bytes = static_cast<int64_t>(total_bytes - free_bytes);
    gauges.memory_total_bytes = static_cast<int64_t>(total_bytes);
  }
  gauges.tuned_shapes = static_cast<int64_t>(selector_->tuned_count());
  const cuda::GemmSelector::TuningCounts tunings = selector_->tuning_counts();
  gauges.tunings_succeeded = tunings.succeeded;
  gauges.tunings_failed = tunings.failed;
  return gauges;
}

absl::StatusOr<std::unique_ptr<GemmBackend>> CreateCudaBackend(
    const CudaBackendOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend,
                   CudaBackend::Create(options));
  return std::unique_ptr<GemmBackend>(std::move(backend));
}

}  // namespace matmul
