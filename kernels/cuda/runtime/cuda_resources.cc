#include "kernels/cuda/runtime/cuda_resources.h"

#include <atomic>
#include <cstdint>
#include <utility>

#include "common/status_macros.h"
#include "kernels/cuda/runtime/cuda_status.h"

namespace matmul::cuda {

absl::StatusOr<DeviceBuffer> DeviceBuffer::Create(size_t bytes) {
  DeviceBuffer buffer;
  RETURN_IF_ERROR(buffer.Reserve(bytes));
  return buffer;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

absl::Status DeviceBuffer::Reserve(size_t bytes) {
  if (bytes <= size_) return absl::OkStatus();
  Reset();
  void* data = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&data, bytes), "cudaMalloc"));
  data_ = data;
  size_ = bytes;
  return absl::OkStatus();
}

void DeviceBuffer::Reset() {
  if (data_ != nullptr) cudaFree(data_);
  data_ = nullptr;
  size_ = 0;
}

absl::StatusOr<StreamBuffer> StreamBuffer::Create(size_t bytes,
                                                  cudaStream_t stream) {
  StreamBuffer buffer;
  void* data = nullptr;
  RETURN_IF_ERROR(
      CudaStatus(cudaMallocAsync(&data, bytes == 0 ? 1 : bytes, stream),
                 "cudaMallocAsync"));
  buffer.data_ = data;
  buffer.stream_ = stream;
  return buffer;
}

StreamBuffer& StreamBuffer::operator=(StreamBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    stream_ = other.stream_;
  }
  return *this;
}

void StreamBuffer::Reset() {
  if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  data_ = nullptr;
}

absl::StatusOr<CudaStream> CudaStream::Create() {
  CudaStream stream;
  RETURN_IF_ERROR(CudaStatus(
      cudaStreamCreateWithFlags(&stream.stream_, cudaStreamNonBlocking),
      "cudaStreamCreateWithFlags"));
  return stream;
}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status CudaStream::Synchronize() const {
  return CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

absl::StatusOr<MappedHostWord> MappedHostWord::Create() {
  MappedHostWord word;
  void* host = nullptr;
  // A cache line of its own: the device writes it while the host polls.
  RETURN_IF_ERROR(CudaStatus(
      cudaHostAlloc(&host, 64, cudaHostAllocMapped | cudaHostAllocPortable),
      "cudaHostAlloc (a mapped word)"));
  word.host_ = static_cast<std::atomic<uint32_t>*>(host);
  word.host_->store(0, std::memory_order_relaxed);
  RETURN_IF_ERROR(CudaStatus(cudaHostGetDevicePointer(&word.device_, host, 0),
                             "cudaHostGetDevicePointer (a mapped word)"));
  return word;
}

MappedHostWord& MappedHostWord::operator=(MappedHostWord&& other) noexcept {
  if (this != &other) {
    if (host_ != nullptr) cudaFreeHost(host_);
    host_ = std::exchange(other.host_, nullptr);
    device_ = std::exchange(other.device_, nullptr);
  }
  return *this;
}

MappedHostWord::~MappedHostWord() {
  if (host_ != nullptr) cudaFreeHost(host_);
}

absl::StatusOr<CudaEvent> CudaEvent::Create(unsigned flags) {
  CudaEvent event;
  RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&event.event_, flags),
                             "cudaEventCreateWithFlags"));
  return event;
}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

absl::Status CudaEvent::Record(cudaStream_t stream) const {
  return CudaStatus(cudaEventRecord(event_, stream), "cudaEventRecord");
}

absl::Status CudaEvent::Synchronize() const {
  return CudaStatus(cudaEventSynchronize(event_), "cudaEventSynchronize");
}

absl::StatusOr<std::shared_ptr<CudaEvent>> EventPool::Take() {
  std::unique_ptr<CudaEvent> event;
  {
    absl::MutexLock lock(&mu_);
    if (!free_.empty()) {
      event = std::move(free_.back());
      free_.pop_back();
    }
  }
  if (event == nullptr) {
    ASSIGN_OR_RETURN(CudaEvent created, CudaEvent::Create());
    event = std::make_unique<CudaEvent>(std::move(created));
  }
  return std::shared_ptr<CudaEvent>(event.release(), [this](CudaEvent* e) {
    absl::MutexLock lock(&mu_);
    free_.emplace_back(e);
  });
}

absl::StatusOr<double> CudaEvent::ElapsedSeconds(const CudaEvent& start,
                                                 const CudaEvent& stop) {
  float ms = 0.0f;
  RETURN_IF_ERROR(
      CudaStatus(cudaEventElapsedTime(&ms, start.event_, stop.event_),
                 "cudaEventElapsedTime"));
  return ms * 1e-3;
}

absl::StatusOr<ScopedDevice> ScopedDevice::Create(int device) {
  int previous = 0;
  RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&previous), "cudaGetDevice"));
  if (previous == device) return ScopedDevice(previous, false);
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  return ScopedDevice(previous, true);
}

ScopedDevice::~ScopedDevice() {
  if (restore_) cudaSetDevice(previous_);
}

}  // namespace matmul::cuda
