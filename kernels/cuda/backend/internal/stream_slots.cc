#include "kernels/cuda/backend/internal/stream_slots.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace matmul::cuda {
namespace {

// How long HoldAll keeps the slots it has while it waits for the rest, at
// first; doubled on each try, up to the most, so that slots busy with long
// products are gathered in the end.
constexpr absl::Duration kFirstPatience = absl::Milliseconds(20);
constexpr absl::Duration kMaxPatience = absl::Seconds(5);
constexpr absl::Duration kStepAside = absl::Milliseconds(1);

}  // namespace

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
    ASSIGN_OR_RETURN(MappedHostWord ends, MappedHostWord::Create());
    auto slot =
        std::make_unique<StreamSlot>(StreamSlot{.stream = std::move(stream),
                                                .start = std::move(start),
                                                .stop = std::move(stop),
                                                .prepared = std::move(prepared),
                                                .ends = std::move(ends)});
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
  ASSIGN_OR_RETURN(std::optional<StreamSlotLease> lease,
                   AcquireBy(absl::InfiniteFuture()));
  return *std::move(lease);
}

absl::StatusOr<std::optional<StreamSlotLease>> StreamSlotPool::AcquireBy(
    absl::Time deadline) {
  ASSIGN_OR_RETURN(ScopedDevice scoped, ScopedDevice::Create(device_));
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithDeadline(absl::Condition(this, &StreamSlotPool::AnyFree),
                             deadline)) {
    return std::nullopt;
  }
  StreamSlot* slot = free_.back();
  free_.pop_back();
  return StreamSlotLease(*this, slot, std::move(scoped));
}

void StreamSlotPool::Release(StreamSlot* slot) {
  absl::MutexLock lock(&mu_);
  free_.push_back(slot);
}

std::shared_ptr<void> StreamSlotPool::HoldAll() {
  absl::Duration patience = kFirstPatience;
  while (true) {
    auto held = std::make_shared<std::vector<StreamSlotLease>>();
    // The first slot is waited for as long as it takes: holding none, the
    // wait holds up nobody.
    absl::StatusOr<StreamSlotLease> first = Acquire();
    if (!first.ok()) return nullptr;
    held->push_back(*std::move(first));
    const absl::Time give_back = absl::Now() + patience;
    while (held->size() < slots_.size()) {
      absl::StatusOr<std::optional<StreamSlotLease>> lease =
          AcquireBy(give_back);
      if (!lease.ok()) return nullptr;
      if (!lease->has_value()) break;
      held->push_back(**std::move(lease));
    }
    if (held->size() == slots_.size()) return held;
    held.reset();
    // Long enough for the callers waiting for a slot to take one.
    absl::SleepFor(kStepAside);
    patience = std::min(2 * patience, kMaxPatience);
  }
}

}  // namespace matmul::cuda
