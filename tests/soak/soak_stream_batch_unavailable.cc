// The stream_batch scenario in a build without CUDA: nothing to run (the
// soak skips it before it starts, as it finds no usable GPU).
#include "tests/soak/soak_worker.h"

namespace matmul::soak {

SoakWorker::StreamBatchState::~StreamBatchState() = default;

void SoakWorker::DropStreamBatch() { stream_batch_.reset(); }

SoakWorker::StreamBatchState* SoakWorker::EnsureStreamBatch() {
  return nullptr;
}

void SoakWorker::StreamBatch() { tally().Count("stream_batch", "skipped"); }

}  // namespace matmul::soak
