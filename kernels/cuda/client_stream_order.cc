#include "kernels/cuda/client_stream_order.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace matmul::cuda {
namespace {

// How often the watchdog looks at the words while waits are pending: it
// only decides when to give up, which is never urgent.
constexpr absl::Duration kWatchPeriod = absl::Milliseconds(1);

absl::Status DriverStatus(const CudaDriverApi& api, CUresult result,
                          const char* what) {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", api.ErrorText(result)));
}

}  // namespace

OrderWatchdog::OrderWatchdog() : thread_([this] { Loop(); }) {}

OrderWatchdog::~OrderWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

OrderWatchdog::Watch::~Watch() {
  absl::MutexLock lock(&watchdog_.mu_);
  auto& watches = watchdog_.watches_;
  watches.erase(std::remove(watches.begin(), watches.end(), this),
                watches.end());
}

absl::Status OrderWatchdog::Watch::status() const {
  absl::MutexLock lock(&watchdog_.mu_);
  return status_;
}

std::unique_ptr<OrderWatchdog::Watch> OrderWatchdog::Start(
    const StreamOrder& order) {
  std::unique_ptr<Watch> watch(new Watch(*this, order));
  absl::MutexLock lock(&mu_);
  watches_.push_back(watch.get());
  return watch;
}

void OrderWatchdog::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const bool pending = std::any_of(watches_.begin(), watches_.end(),
                                     [](const Watch* w) { return !w->done_; });
    if (pending) {
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), kWatchPeriod);
      Check();
    } else {
      // Sleeps until a watch starts (or the timeout: no signal on Start).
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(50));
    }
  }
}

void OrderWatchdog::Check() {
  for (Watch* watch : watches_) {
    if (watch->done_) continue;
    const StreamOrder& order = watch->order_;
    if (WordReached(order.wait_host->load(std::memory_order_acquire),
                    order.wait_value)) {
      watch->done_ = true;
      continue;
    }
    if (!order.give_up) continue;
    absl::Status give_up = order.give_up();
    if (give_up.ok()) continue;
    order.wait_host->store(order.wait_value, std::memory_order_release);
    watch->done_ = true;
    watch->status_ = std::move(give_up);
  }
}

absl::Status QueueClientWaits(const CudaDriverApi& api,
                              absl::Span<const GemmProblem* const> problems,
                              cudaStream_t stream) {
  for (const GemmProblem* p : problems) {
    const StreamOrder* order = p->stream_order;
    if (order == nullptr) continue;
    if (absl::Status status = DriverStatus(
            api,
            api.stream_wait_value32(
                stream, reinterpret_cast<CUdeviceptr>(order->wait_device),
                order->wait_value, CU_STREAM_WAIT_VALUE_GEQ),
            "cuStreamWaitValue32 (the client's stream)");
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status QueueClientSignals(const CudaDriverApi& api,
                                absl::Span<const GemmProblem* const> problems,
                                cudaStream_t stream) {
  for (const GemmProblem* p : problems) {
    const StreamOrder* order = p->stream_order;
    if (order == nullptr || order->signal_device == nullptr) continue;
    // The default flags put a memory barrier before the write: the
    // client's stream sees the product's output once it sees the value.
    if (absl::Status status = DriverStatus(
            api,
            api.stream_write_value32(
                stream, reinterpret_cast<CUdeviceptr>(order->signal_device),
                order->signal_value, CU_STREAM_WRITE_VALUE_DEFAULT),
            "cuStreamWriteValue32 (the client's signal)");
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

void StoreClientSignals(absl::Span<const GemmProblem* const> problems) {
  for (const GemmProblem* p : problems) {
    const StreamOrder* order = p->stream_order;
    if (order == nullptr || order->signal_host == nullptr) continue;
    order->signal_host->store(order->signal_value, std::memory_order_release);
  }
}

void ReleaseClientWaits(absl::Span<const GemmProblem* const> problems) {
  for (const GemmProblem* p : problems) {
    if (p->stream_order == nullptr) continue;
    p->stream_order->wait_host->store(p->stream_order->wait_value,
                                      std::memory_order_release);
  }
}

bool AnyStreamOrdered(absl::Span<const GemmProblem* const> problems) {
  return std::any_of(
      problems.begin(), problems.end(),
      [](const GemmProblem* p) { return p->stream_order != nullptr; });
}

}  // namespace matmul::cuda
