// The stream_batch scenario (CUDA builds; soak_stream_batch_unavailable.cc
// otherwise): several stream-ordered products of one shape queued at once
// on the worker's CUDA stream through a ring of its own, so that the
// daemon may launch them together (a batched stream-ordered launch). Each
// output, written in place in a cuda_ipc region, is checked against its
// FP64 reference once every product is answered and the stream has passed
// them.
#include <cuda_runtime_api.h>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "client/stream_order/stream_ordered_calls.h"
#include "tests/soak/soak_worker.h"

namespace matmul::soak {
namespace {

using absl::StatusCode;

constexpr char kScenario[] = "stream_batch";
// Most products queued at once in one step (a ring's slots bound it too).
constexpr int kMostProducts = 6;

}  // namespace

SoakWorker::StreamBatchState::~StreamBatchState() {
  calls.reset();
  ring.reset();
  region.reset();
  memory.reset();
  if (stream != nullptr) cudaStreamDestroy(stream);
}

void SoakWorker::DropStreamBatch() { stream_batch_.reset(); }

SoakWorker::StreamBatchState* SoakWorker::EnsureStreamBatch() {
  if (stream_batch_ != nullptr && session_ != nullptr && session_->alive() &&
      stream_batch_->ring->attached()) {
    return stream_batch_.get();
  }
  stream_batch_.reset();
  if (!EnsureSession()) return nullptr;
  auto state = std::make_unique<StreamBatchState>();
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) !=
      cudaSuccess) {
    tally().Fail("setup", "cudaStreamCreateWithFlags failed");
    return nullptr;
  }
  state->stream = stream;
  absl::StatusOr<std::unique_ptr<CudaMemory>> memory =
      CudaMemory::Create(CudaMemory::Kind::kIpc,
                         static_cast<int64_t>(kMostProducts * ProductBytes()));
  if (!memory.ok()) {
    tally().Fail("setup", absl::StrCat("allocating cuda_ipc memory: ",
                                       memory.status().ToString()));
    return nullptr;
  }
  state->memory = *std::move(memory);
  state->staging.resize(static_cast<size_t>(state->memory->size_bytes()));
  absl::StatusOr<std::unique_ptr<RegisteredRegion>> region =
      RegisteredRegion::Register(*client_, *session_,
                                 state->memory->RegisterRequest(),
                                 options_.call_timeout);
  if (!tally().Record("setup", "RegisterRegion(cuda_ipc)", region.status(),
                      {StatusCode::kOk})) {
    return nullptr;
  }
  state->region = *std::move(region);
  state->ring = AttachNewRing();
  if (state->ring == nullptr) return nullptr;
  absl::StatusOr<std::unique_ptr<StreamOrderedCalls>> calls =
      StreamOrderedCalls::Create(*client_, *session_, *state->ring,
                                 kMostProducts);
  if (!tally().Record("setup", "StreamOrderedCalls", calls.status(),
                      {StatusCode::kOk})) {
    return nullptr;
  }
  state->calls = *std::move(calls);
  stream_batch_ = std::move(state);
  return stream_batch_.get();
}

void SoakWorker::StreamBatch() {
  StreamBatchState* state = EnsureStreamBatch();
  if (state == nullptr) return;
  // One shape (so one batch key) for every product of the step.
  const ProblemSpec spec = RandomSpec(1, options_.max_dim);
  const int count = 2 + static_cast<int>(rng_() % (kMostProducts - 1));
  std::vector<RegionRequest> placed;
  uint64_t offset = 0;
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<RegionRequest> one = MakeRandomRegionRequest(
        spec, rng_, absl::MakeSpan(state->staging), state->region->id(),
        session_->session_id(), RegionPlacement{}, offset);
    if (!one.ok()) return tally().Fail(kScenario, one.status().ToString());
    offset = one->end_offset_bytes;
    placed.push_back(*std::move(one));
  }
  const absl::Span<char> used = absl::MakeSpan(state->staging).first(offset);
  if (absl::Status copied = state->memory->CopyFromHost(used); !copied.ok()) {
    return tally().Fail(kScenario, copied.ToString());
  }
  // Signalled or not at random: the daemon batches both (the stream waits
  // for the signalled ones).
  absl::Mutex mu;
  std::vector<std::optional<absl::Status>> answers(placed.size());
  absl::BlockingCounter pending(count);
  for (int i = 0; i < count; ++i) {
    absl::Status queued = state->calls->Matmul(
        placed[i].request, state->stream, options_.call_timeout,
        [&, i](absl::Status status) {
          {
            absl::MutexLock lock(&mu);
            answers[i] = std::move(status);
          }
          pending.DecrementCount();
        },
        /*signal_stream=*/(rng_() & 1) != 0);
    if (!queued.ok()) {
      absl::MutexLock lock(&mu);
      answers[i] = std::move(queued);
      pending.DecrementCount();
    }
  }
  pending.Wait();
  if (cudaStreamSynchronize(state->stream) != cudaSuccess) {
    return tally().Fail(kScenario, "cudaStreamSynchronize failed");
  }
  if (absl::Status copied = state->memory->CopyToHost(used); !copied.ok()) {
    return tally().Fail(kScenario, copied.ToString());
  }
  const v1::MatmulResponse in_place;  // outputs are in the region
  for (int i = 0; i < count; ++i) {
    if (tally().Record(kScenario, "stream-ordered Matmul", *answers[i],
                       {StatusCode::kOk})) {
      CheckRegion(kScenario, placed[i], in_place, state->staging);
    }
  }
}

}  // namespace matmul::soak
