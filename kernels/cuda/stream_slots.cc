#include "kernels/cuda/stream_slots.h"

#include <utility>

#include "common/status_macros.h"

namespace matmul::cuda {

StreamSlotLease::StreamSlotLease(StreamSlotLease&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      slot_(std::exchange(other.slot_, nullptr)),
      scoped_(std::move(other.scoped_)) {}

StreamSlotLease::~StreamSlotLease() {
  if (pool_ != nullptr) pool_->Release(slot_);
}

absl::StatusOr<std::unique_ptr<StreamSlotPool>> StreamSlotPool::Create(
    int device, int count, size_t workspace_bytes) {
  ASSIGN_OR_RETURN(ScopedDevice scoped, ScopedDevice::Create(device));
  std::vector<std::unique_ptr<StreamSlot>> slots;
  for (int i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());
    ASSIGN_OR_RETURN(CudaEvent start, CudaEvent::Create());
    ASSIGN_OR_RETURN(CudaEvent stop, CudaEvent::Create());
    ASSIGN_OR_RETURN(CudaEvent prepared, CudaEvent::Create());
    auto slot = std::make_unique<StreamSlot>(
        StreamSlot{std::move(stream), std::move(start), std::move(stop),
                   std::move(prepared)});
    RETURN_IF_ERROR(slot->workspace.Reserve(workspace_bytes));
    slots.push_back(std::move(slot));
  }
  return std::unique_ptr<StreamSlotPool>(
      new StreamSlotPool(device, std::move(slots)));
}

StreamSlotPool::StreamSlotPool(int device,
                               std::vector<std::unique_ptr<StreamSlot>> slots)
    : device_(device), slots_(std::move(slots)) {
  for (const std::unique_ptr<StreamSlot>& slot : slots_) {
    free_.push_back(slot.get());
  }
}

absl::StatusOr<StreamSlotLease> StreamSlotPool::Acquire() {
  ASSIGN_OR_RETURN(ScopedDevice scoped, ScopedDevice::Create(device_));
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &StreamSlotPool::AnyFree));
  StreamSlot* slot = free_.back();
  free_.pop_back();
  return StreamSlotLease(*this, slot, std::move(scoped));
}

void StreamSlotPool::Release(StreamSlot* slot) {
  absl::MutexLock lock(&mu_);
  free_.push_back(slot);
}

std::shared_ptr<void> StreamSlotPool::HoldAll() {
  auto held = std::make_shared<std::vector<StreamSlotLease>>();
  for (size_t i = 0; i < slots_.size(); ++i) {
    absl::StatusOr<StreamSlotLease> lease = Acquire();
    if (!lease.ok()) return nullptr;
    held->push_back(*std::move(lease));
  }
  return held;
}

}  // namespace matmul::cuda
