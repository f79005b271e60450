#include "client/stream_order/stream_ordered_calls.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/stream_order/stream_order_numbers.h"
#include "common/cuda_driver_api.h"
#include "common/gemm/stream_order.h"
#include "common/status_macros.h"

namespace matmul {
namespace {

// Each pair's words sit on their own cache line: the two GPUs and both
// CPUs write different pairs at the same time.
constexpr int64_t kPairBytes = 64;
constexpr int64_t kSignalOffset = 4;

absl::Status CudaError(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

}  // namespace

// The words: a shm segment registered with the daemon (which maps it) and
// with this process's CUDA context (so the caller's stream reaches it).
class StreamOrderedCalls::Words {
 public:
  static absl::StatusOr<std::unique_ptr<Words>> Create(
      Client& client, const Session& session, int pairs,
      const std::string& shm_prefix) {
    ASSIGN_OR_RETURN(CudaDriverApi api, LoadCudaDriverApi());
    ASSIGN_OR_RETURN(
        std::unique_ptr<SharedMemorySegment> segment,
        SharedMemorySegment::Create(pairs * kPairBytes, shm_prefix));
    RETURN_IF_ERROR(CudaError(
        cudaHostRegister(segment->data(),
                         static_cast<size_t>(segment->size_bytes()),
                         cudaHostRegisterMapped | cudaHostRegisterPortable),
        "cudaHostRegister (stream order words)"));
    auto words = std::unique_ptr<Words>(new Words(api, std::move(segment)));
    RETURN_IF_ERROR(CudaError(
        cudaHostGetDevicePointer(&words->device_, words->segment_->data(), 0),
        "cudaHostGetDevicePointer (stream order words)"));
    ASSIGN_OR_RETURN(words->region_, RegisteredRegion::RegisterShm(
                                         client, session, *words->segment_));
    words->segment_->Unlink();
    return words;
  }

  ~Words() {
    region_.reset();
    cudaHostUnregister(segment_->data());
  }

  const CudaDriverApi& api() const { return api_; }
  const std::string& region_id() const { return region_->id(); }
  std::atomic<uint32_t>* SignalHost(int pair) const {
    return reinterpret_cast<std::atomic<uint32_t>*>(
        segment_->data() + pair * kPairBytes + kSignalOffset);
  }
  CUdeviceptr WaitDevice(int pair) const {
    return reinterpret_cast<CUdeviceptr>(device_) + pair * kPairBytes;
  }
  CUdeviceptr SignalDevice(int pair) const {
    return WaitDevice(pair) + kSignalOffset;
  }

 private:
  Words(CudaDriverApi api, std::unique_ptr<SharedMemorySegment> segment)
      : api_(api), segment_(std::move(segment)) {}

  const CudaDriverApi api_;
  const std::unique_ptr<SharedMemorySegment> segment_;
  void* device_ = nullptr;
  std::unique_ptr<RegisteredRegion> region_;
};

absl::StatusOr<std::unique_ptr<StreamOrderedCalls>> StreamOrderedCalls::Create(
    Client& client, const Session& session, RequestRing& ring, int pairs) {
  if (pairs < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pairs is ", pairs, "; expected >= 1"));
  }
  ASSIGN_OR_RETURN(
      std::unique_ptr<Words> words,
      Words::Create(client, session, pairs, ring.options().shm_prefix));
  auto calls = std::unique_ptr<StreamOrderedCalls>(
      new StreamOrderedCalls(ring, std::move(words)));
  absl::MutexLock lock(&calls->mu_);
  for (int pair = pairs - 1; pair >= 0; --pair) {
    calls->free_pairs_.push_back(pair);
  }
  return calls;
}

StreamOrderedCalls::StreamOrderedCalls(RequestRing& ring,
                                       std::unique_ptr<Words> words)
    : ring_(ring), words_(std::move(words)) {}

StreamOrderedCalls::~StreamOrderedCalls() {
  // The completion callbacks use the words and the free list.
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](std::atomic<int>* n) { return n->load() == 0; }, &in_flight_));
}

std::optional<int> StreamOrderedCalls::TakePair(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto any_free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !free_pairs_.empty();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&any_free), timeout)) {
    return std::nullopt;
  }
  const int pair = free_pairs_.back();
  free_pairs_.pop_back();
  return pair;
}

void StreamOrderedCalls::ReturnPair(int pair) {
  absl::MutexLock lock(&mu_);
  free_pairs_.push_back(pair);
}

absl::Status StreamOrderedCalls::Matmul(v1::MatmulRequest request,
                                        Stream stream, absl::Duration timeout,
                                        RequestRing::Callback done,
                                        bool signal_stream) {
  const std::optional<int> pair = TakePair(timeout);
  if (!pair) {
    return absl::DeadlineExceededError(
        absl::StrCat("every stream-order word pair stayed in use for ",
                     absl::FormatDuration(timeout)));
  }
  const uint32_t sequence =
      next_sequence_.fetch_add(1, std::memory_order_relaxed);
  const CudaDriverApi& api = words_->api();
  auto* cu_stream = reinterpret_cast<CUstream>(stream);
  // The stream's earlier work, then the wait word; then (for the work
  // queued after the call) the signal word. Numbered as they are queued:
  // the daemon launches the process's products in this order.
  StreamOrderNumbers& numbers = StreamOrderNumbers::OfThisProcess();
  absl::StatusOr<StreamOrderNumbers::Number> number = numbers.Take([&] {
    CUresult result =
        api.stream_write_value32(cu_stream, words_->WaitDevice(*pair), sequence,
                                 CU_STREAM_WRITE_VALUE_DEFAULT);
    if (result == CUDA_SUCCESS && signal_stream) {
      result = api.stream_wait_value32(cu_stream, words_->SignalDevice(*pair),
                                       sequence, CU_STREAM_WAIT_VALUE_GEQ);
    }
    if (result == CUDA_SUCCESS) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("queueing the stream order on the caller's stream: ",
                     api.ErrorText(result)));
  });
  if (!number.ok()) {
    // A wait that did get queued must not hang the stream.
    words_->SignalHost(*pair)->store(sequence, std::memory_order_release);
    ReturnPair(*pair);
    return number.status();
  }
  v1::StreamOrder* order = request.mutable_stream_order();
  order->set_region_id(words_->region_id());
  order->set_wait_offset_bytes(*pair * kPairBytes);
  order->set_wait_value(sequence);
  order->set_signal(signal_stream);
  order->set_number(number->number);
  order->set_answered_below(number->answered_below);
  if (signal_stream) {
    order->set_signal_offset_bytes(*pair * kPairBytes + kSignalOffset);
    order->set_signal_value(sequence);
  }
  struct Call {
    v1::MatmulResponse response;
    RequestRing::Callback done;
  };
  auto call = std::make_unique<Call>();
  call->done = std::move(done);
  v1::MatmulResponse* response = &call->response;
  in_flight_.fetch_add(1, std::memory_order_acq_rel);
  ring_.CallAsync(
      request, response, timeout,
      [this, pair = *pair, sequence, signal_stream, number = number->number,
       &numbers, call = std::move(call)](absl::Status status) mutable {
        numbers.Answered(number);
        if (!status.ok() && signal_stream) {
          words_->SignalHost(pair)->store(sequence, std::memory_order_release);
        }
        // A pair whose call timed out here may still be run by the
        // daemon, which would then write an old number into it:
        // retire it.
        if (!absl::IsDeadlineExceeded(status)) ReturnPair(pair);
        std::move(call->done)(std::move(status));
        call.reset();
        absl::MutexLock lock(&mu_);
        in_flight_.fetch_sub(1, std::memory_order_acq_rel);
      });
  return absl::OkStatus();
}

}  // namespace matmul
