#include "server/api/ring_reactor.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/transport/peer_identity.h"

namespace matmul {

RingReactor::RingReactor(ProductSubmitter& submitter, RingPollers& pollers,
                         std::shared_ptr<AttachedRing> ring,
                         std::string session_id, const PeerCredentials& owner,
                         std::function<void(RingReactor*)> on_done)
    : submitter_(submitter),
      ring_(std::move(ring)),
      session_id_(std::move(session_id)),
      owner_(owner),
      on_done_(std::move(on_done)) {
  event_.set_slot_count(ring_->slot_count());
  polled_ =
      pollers.Add(ring_, {.dispatch = [this](uint32_t slot) { Dispatch(slot); },
                          .faulted = [this] { Faulted(); }});
  StartWrite(&event_);
}

void RingReactor::Faulted() {
  // The client shrank the ring's segment: the mapping is private zeros
  // now, shared with nobody. Queued requests are dropped and the stream
  // says why.
  ring_->MarkClientGone();
  const absl::Status status = ring_->FaultedStatus();
  Close(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                     std::string(status.message())));
}

namespace {

// A request taken from a ring and its response, with their fields in one
// allocation: the arena's first block (a parsed request is a dozen small
// allocations otherwise, and as many frees).
class RingCall {
 public:
  RingCall()
      : arena_(ArenaOptions(block_)),
        request(
            google::protobuf::Arena::CreateMessage<v1::MatmulRequest>(&arena_)),
        response(google::protobuf::Arena::CreateMessage<v1::MatmulResponse>(
            &arena_)) {}

 private:
  static google::protobuf::ArenaOptions ArenaOptions(char* block) {
    google::protobuf::ArenaOptions options;
    options.initial_block = block;
    options.initial_block_size = kBlockBytes;
    return options;
  }
  static constexpr size_t kBlockBytes = 4096;
  alignas(16) char block_[kBlockBytes];
  google::protobuf::Arena arena_;

 public:
  v1::MatmulRequest* const request;
  v1::MatmulResponse* const response;
};

}  // namespace

void RingReactor::Dispatch(uint32_t slot) {
  auto call = std::make_unique<RingCall>();
  absl::Duration timeout;
  if (absl::Status read = ring_->ReadRequest(slot, call->request, &timeout);
      !read.ok()) {
    call->response->set_status_code(static_cast<int32_t>(read.code()));
    call->response->set_status_message(std::string(read.message()));
    ring_->Complete(slot, *call->response);
    return;
  }
  // The copy may be zeros from a mapping that faulted while it was taken.
  if (ring_->faulted()) return;
  // A ring acts in the session it was attached in, whatever the slot says.
  call->request->set_session_id(session_id_);
  CallControl control;
  if (timeout > absl::ZeroDuration()) control.deadline = absl::Now() + timeout;
  control.cancelled = [ring = ring_.get()] { return ring->client_gone(); };
  control.caller = owner_;
  control.client_key = ClientKey(owner_);
  control.origin = absl::StrCat("ring slot ", slot, " of session ", session_id_,
                                " (pid ", owner_.pid, ")");
  RingCall* raw = call.get();
  submitter_.Submit(
      std::move(control), raw->request, raw->response,
      [ring = ring_, slot,
       call = std::move(call)](absl::Status status) mutable {
        v1::MatmulResponse* response = call->response;
        if (!status.ok()) {
          response->Clear();
          response->set_request_id(call->request->request_id());
          response->set_status_code(static_cast<int32_t>(status.code()));
          response->set_status_message(std::string(status.message()));
        }
        ring->Complete(slot, *response);
      });
}

void RingReactor::Close(const grpc::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
  }
  Finish(status);
}

void RingReactor::OnWriteDone(bool ok) {
  // After the event is delivered the stream stays open: nothing more to send.
  if (!ok) {
    ring_->MarkClientGone();
    Close(grpc::Status(grpc::StatusCode::CANCELLED, "client gone"));
  }
}

void RingReactor::OnCancel() {
  ring_->MarkClientGone();
  Close(grpc::Status(grpc::StatusCode::CANCELLED, "ring detached"));
}

void RingReactor::OnDone() {
  polled_.reset();
  on_done_(this);
  // gRPC owns reactors by raw pointer; the reactor deletes itself here.
  delete this;
}

}  // namespace matmul
