// StreamOrderedCalls in a build without CUDA (MATMUL_CUDA=OFF): Create says
// so; nothing else is reachable.
#include "client/stream_order/stream_ordered_calls.h"

namespace matmul {

class StreamOrderedCalls::Words {};

absl::StatusOr<std::unique_ptr<StreamOrderedCalls>> StreamOrderedCalls::Create(
    Client& /*client*/, const Session& /*session*/, RequestRing& /*ring*/,
    int /*pairs*/) {
  return absl::FailedPreconditionError(
      "stream-ordered calls need CUDA; this client was built without it");
}

StreamOrderedCalls::~StreamOrderedCalls() = default;

absl::Status StreamOrderedCalls::Matmul(v1::MatmulRequest /*request*/,
                                        Stream /*stream*/,
                                        absl::Duration /*timeout*/,
                                        RequestRing::Callback /*done*/,
                                        bool /*signal_stream*/) {
  return absl::FailedPreconditionError(
      "stream-ordered calls need CUDA; this client was built without it");
}

}  // namespace matmul
