// RAII owners for the CUDA objects this folder uses: device buffers, streams,
// events and mapped host words. Each is move-only, made by a static Create that
// reports failure as a Status, and released in its destructor (errors there are
// ignored: nothing useful can be done with them while unwinding).
#ifndef MATMUL_KERNELS_CUDA_RUNTIME_CUDA_RESOURCES_H_
#define MATMUL_KERNELS_CUDA_RUNTIME_CUDA_RESOURCES_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace matmul::cuda {

// Device memory from cudaMalloc (256-byte aligned). An empty buffer holds
// nullptr and size 0.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static absl::StatusOr<DeviceBuffer> Create(size_t bytes);

  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void* data() const { return data_; }
  size_t size() const { return size_; }

  // Makes sure the buffer holds at least `bytes`; reallocates (dropping the
  // contents) only when it must grow, so a pool of these settles quickly.
  absl::Status Reserve(size_t bytes);

 private:
  void Reset();
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Stream-ordered scratch memory (cudaMallocAsync), freed on its stream when
// it goes out of scope: safe for temporaries whose kernels are still queued.
class StreamBuffer {
 public:
  StreamBuffer() = default;
  static absl::StatusOr<StreamBuffer> Create(size_t bytes, cudaStream_t stream);
  StreamBuffer(StreamBuffer&& other) noexcept { *this = std::move(other); }
  StreamBuffer& operator=(StreamBuffer&& other) noexcept;
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  ~StreamBuffer() { Reset(); }

  void* data() const { return data_; }

 private:
  void Reset();
  void* data_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// A non-blocking stream on the current device.
class CudaStream {
 public:
  static absl::StatusOr<CudaStream> Create();
  CudaStream(CudaStream&& other) noexcept { *this = std::move(other); }
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  ~CudaStream();

  cudaStream_t get() const { return stream_; }
  absl::Status Synchronize() const;

 private:
  CudaStream() = default;
  cudaStream_t stream_ = nullptr;
};

// An event, with timing enabled unless `flags` say otherwise.
class CudaEvent {
 public:
  static absl::StatusOr<CudaEvent> Create(unsigned flags = cudaEventDefault);
  CudaEvent(CudaEvent&& other) noexcept { *this = std::move(other); }
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent();

  cudaEvent_t get() const { return event_; }
  absl::Status Record(cudaStream_t stream) const;
  absl::Status Synchronize() const;

  // Seconds between `start` and `stop`, both recorded and complete.
  static absl::StatusOr<double> ElapsedSeconds(const CudaEvent& start,
                                               const CudaEvent& stop);

 private:
  CudaEvent() = default;
  cudaEvent_t event_ = nullptr;
};

// A 32-bit word of pinned host memory that the device writes too (a
// stream's cuStreamWriteValue32 at device()): the host reads its progress
// there without a CUDA call.
class MappedHostWord {
 public:
  static absl::StatusOr<MappedHostWord> Create();
  MappedHostWord(MappedHostWord&& other) noexcept { *this = std::move(other); }
  MappedHostWord& operator=(MappedHostWord&& other) noexcept;
  MappedHostWord(const MappedHostWord&) = delete;
  MappedHostWord& operator=(const MappedHostWord&) = delete;
  ~MappedHostWord();

  std::atomic<uint32_t>* host() const { return host_; }
  void* device() const { return device_; }

 private:
  MappedHostWord() = default;
  std::atomic<uint32_t>* host_ = nullptr;
  void* device_ = nullptr;
};

// Timing events handed out as shared pointers: an event goes back to the
// pool when its last holder lets go, so that a holder can keep reading a
// mark another thread recorded. The pool must outlive its events.
class EventPool {
 public:
  absl::StatusOr<std::shared_ptr<CudaEvent>> Take();

 private:
  absl::Mutex mu_;
  std::vector<std::unique_ptr<CudaEvent>> free_ ABSL_GUARDED_BY(mu_);
};

// Makes `device` current for the calling thread for the object's lifetime
// and restores the previous device afterwards. The runtime keeps the current
// device per thread, and the daemon calls in from many threads.
class ScopedDevice {
 public:
  static absl::StatusOr<ScopedDevice> Create(int device);
  ScopedDevice(ScopedDevice&& other) noexcept
      : previous_(other.previous_), restore_(other.restore_) {
    other.restore_ = false;
  }
  ScopedDevice& operator=(ScopedDevice&&) = delete;
  ScopedDevice(const ScopedDevice&) = delete;
  ~ScopedDevice();

 private:
  ScopedDevice(int previous, bool restore)
      : previous_(previous), restore_(restore) {}
  int previous_ = 0;
  bool restore_ = false;
};

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_RUNTIME_CUDA_RESOURCES_H_
