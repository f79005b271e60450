#include "kernels/cuda/backend/internal/client_stream_order.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/request_ring_layout.h"
#include "common/status_macros.h"

namespace matmul::cuda {
namespace {

// A product waits for its client's stream about as long as the previous
// product of that stream runs, so the worker polls the word that long
// before it sleeps: a sleep would leave the GPU idle until it ends.
constexpr absl::Duration kSpin = absl::Milliseconds(2);
constexpr absl::Duration kSleep = absl::Microseconds(50);
// How often a sleeping wait asks give_up.
constexpr absl::Duration kGiveUpPeriod = absl::Milliseconds(1);

absl::Status WaitForClientStream(const StreamOrder& order,
                                 const std::function<bool()>& enough) {
  auto reached = [&order, &enough] {
    return WordReached(order.wait_host->load(std::memory_order_acquire),
                       order.wait_value) ||
           (enough && enough());
  };
  const absl::Time start = absl::Now();
  absl::Time next_check = start;
  while (!reached()) {
    const absl::Time now = absl::Now();
    if (now - start < kSpin) {
      for (int i = 0; i < 64 && !reached(); ++i) ring::CpuRelax();
      continue;
    }
    if (now >= next_check && order.give_up) {
      RETURN_IF_ERROR(order.give_up());
      next_check = now + kGiveUpPeriod;
    }
    absl::SleepFor(kSleep);
  }
  return absl::OkStatus();
}

bool AllReached(absl::Span<const GemmProblem* const> problems) {
  for (const GemmProblem* p : problems) {
    const StreamOrder* order = p->stream_order;
    if (order != nullptr &&
        !WordReached(order->wait_host->load(std::memory_order_acquire),
                     order->wait_value)) {
      return false;
    }
  }
  return true;
}

absl::Status GiveUpStatus(absl::Span<const GemmProblem* const> problems) {
  for (const GemmProblem* p : problems) {
    const StreamOrder* order = p->stream_order;
    if (order == nullptr || !order->give_up) continue;
    RETURN_IF_ERROR(order->give_up());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WaitForClientStreams(absl::Span<const GemmProblem* const> problems,
                                  const std::function<bool()>& enough) {
  for (const GemmProblem* p : problems) {
    if (p->stream_order == nullptr) continue;
    RETURN_IF_ERROR(WaitForClientStream(*p->stream_order, enough));
    if (enough && enough()) break;
  }
  return absl::OkStatus();
}

absl::Status QueueClientWaits(const CudaDriverApi& api,
                              absl::Span<const GemmProblem* const> problems,
                              cudaStream_t stream) {
  for (const GemmProblem* p : problems) {
    const StreamOrder* order = p->stream_order;
    if (order == nullptr) continue;
    // GEQ compares as (int32_t)(word - value) >= 0, as WordReached does.
    const CUresult result = api.stream_wait_value32(
        stream, reinterpret_cast<CUdeviceptr>(order->wait_device),
        order->wait_value, CU_STREAM_WAIT_VALUE_GEQ);
    if (result != CUDA_SUCCESS) {
      return absl::InternalError(
          absl::StrCat("cuStreamWaitValue32 (the client's stream): ",
                       api.ErrorText(result)));
    }
  }
  return absl::OkStatus();
}

void ReleaseQueuedWaits(absl::Span<const GemmProblem* const> problems) {
  for (const GemmProblem* p : problems) {
    const StreamOrder* order = p->stream_order;
    if (order == nullptr) continue;
    order->wait_host->store(order->wait_value, std::memory_order_release);
  }
}

QueuedWaitWatch::QueuedWaitWatch(absl::Span<const GemmProblem* const> problems,
                                 absl::Time start)
    : problems_(problems.begin(), problems.end()),
      next_check_(start + kGiveUpPeriod) {}

void QueuedWaitWatch::Check(absl::Time now) {
  if (!status_.ok() || now < next_check_ || AllReached(problems_)) return;
  status_ = GiveUpStatus(problems_);
  next_check_ = now + kGiveUpPeriod;
  if (!status_.ok()) ReleaseQueuedWaits(problems_);
}

absl::Status AwaitQueuedWaits(absl::Span<const GemmProblem* const> problems,
                              const std::function<bool()>& done) {
  const absl::Time start = absl::Now();
  QueuedWaitWatch watch(problems, start);
  while (!done()) {
    const absl::Time now = absl::Now();
    watch.Check(now);
    if (now - start < kSpin) {
      for (int i = 0; i < 64; ++i) ring::CpuRelax();
    } else {
      absl::SleepFor(kSleep);
    }
  }
  return watch.status();
}

absl::Status QueueClientSignals(const CudaDriverApi& api,
                                absl::Span<const GemmProblem* const> problems,
                                cudaStream_t stream) {
  for (const GemmProblem* p : problems) {
    const StreamOrder* order = p->stream_order;
    if (order == nullptr || order->signal_device == nullptr) continue;
    // The default flags put a memory barrier before the write: the
    // client's stream sees the product's output once it sees the value.
    const CUresult result = api.stream_write_value32(
        stream, reinterpret_cast<CUdeviceptr>(order->signal_device),
        order->signal_value, CU_STREAM_WRITE_VALUE_DEFAULT);
    if (result != CUDA_SUCCESS) {
      return absl::InternalError(
          absl::StrCat("cuStreamWriteValue32 (the client's signal): ",
                       api.ErrorText(result)));
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

}  // namespace matmul::cuda
