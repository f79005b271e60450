// The CUDA backend's stream slots: what one call in flight uses alone (a
// stream, its timing events, a workspace and staging buffers), pooled so
// that up to `count` calls run at once and further callers wait for a free
// slot. Not to be confused with server/execution/device_lane.h's DeviceLane,
// which is one per GPU: a GPU's backend has several stream slots.
#ifndef MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_STREAM_SLOTS_H_
#define MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_STREAM_SLOTS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/cuda/runtime/cuda_resources.h"

namespace matmul::cuda {

// What one call in flight uses alone.
struct StreamSlot {
  CudaStream stream;
  CudaEvent start;
  CudaEvent stop;
  // Marks the slot's work that a product on the shared serial stream must
  // wait for (staging, gathers).
  CudaEvent prepared;
  DeviceBuffer workspace;
  // Staging for RunHost and stacked batches (a, c), pointer arrays for
  // RunBatch: grown on demand, kept between calls.
  DeviceBuffer a_buffer;
  DeviceBuffer b_buffer;
  DeviceBuffer c_buffer;
  DeviceBuffer pointer_arrays;
  // A product list's scratch (kernels/gemm_list.h), kept between lists.
  DeviceBuffer scratch;
  // Where the stream marks the end of each queued launch, numbered by
  // `launches` (CudaBackend::Watch, --completion_poll=word).
  MappedHostWord ends;
  uint32_t launches = 0;
};

class StreamSlotPool;

// Holds a slot for one call and gives it back (and restores the calling
// thread's device) when it goes out of scope.
class StreamSlotLease {
 public:
  StreamSlotLease(StreamSlotLease&& other) noexcept;
  StreamSlotLease& operator=(StreamSlotLease&&) = delete;
  ~StreamSlotLease();

  StreamSlot& slot() const { return *slot_; }
  // Restores the calling thread's device now, before the lease moves to
  // the thread that gives the slot back (CudaBackend::StartBatch).
  void RestoreDevice() { scoped_.reset(); }

 private:
  friend class StreamSlotPool;
  StreamSlotLease(StreamSlotPool& pool, StreamSlot* slot, ScopedDevice scoped)
      : pool_(&pool), slot_(slot) {
    scoped_.emplace(std::move(scoped));
  }

  StreamSlotPool* pool_;
  StreamSlot* slot_;
  std::optional<ScopedDevice> scoped_;
};

class StreamSlotPool {
 public:
  // `count` slots on `device` (current for the call), each with
  // `workspace_bytes` of workspace reserved up front: a cudaMalloc inside
  // the first timed product would count as kernel time (and synchronise
  // the device).
  static absl::StatusOr<std::unique_ptr<StreamSlotPool>> Create(
      int device, int count, size_t workspace_bytes);

  // Waits for a free slot; makes the pool's device current until the
  // lease ends.
  absl::StatusOr<StreamSlotLease> Acquire();

  // Every slot (e.g. to pause serving while the selector times a key);
  // null if the device cannot be made current. Takes them one at a time
  // as they come free, but gives back those it took when the rest do not
  // come within a while, and tries again: a slot may be held by a product
  // whose wait on the GPU ends only once another product has had a slot
  // (products of several clients queued on one CUDA stream).
  std::shared_ptr<void> HoldAll();

  size_t size() const { return slots_.size(); }

 private:
  friend class StreamSlotLease;
  StreamSlotPool(int device, std::vector<std::unique_ptr<StreamSlot>> slots);
  // Acquire, giving up at `deadline`: nullopt then.
  absl::StatusOr<std::optional<StreamSlotLease>> AcquireBy(absl::Time deadline);
  void Release(StreamSlot* slot);
  bool AnyFree() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !free_.empty();
  }

  const int device_;
  const std::vector<std::unique_ptr<StreamSlot>> slots_;
  absl::Mutex mu_;
  std::vector<StreamSlot*> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_STREAM_SLOTS_H_
