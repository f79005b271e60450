#include "client/ring/request_ring.h"

#include <algorithm>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/request_ring_layout.h"

namespace matmul {
namespace {

// How long answers may still arrive once the daemon ended the AttachRing
// stream: a daemon that shuts down runs what it queued before it exits.
constexpr absl::Duration kDetachGrace = absl::Seconds(5);

}  // namespace

absl::StatusOr<std::unique_ptr<RequestRing>> RequestRing::Attach(
    Client& client, const Session& session, const RequestRingOptions& options,
    absl::Duration timeout) {
  if (options.slots < 1 || options.slots > static_cast<int>(ring::kMaxSlots)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ring slots is ", options.slots, "; expected 1..", ring::kMaxSlots));
  }
  if (options.slot_bytes < static_cast<int>(ring::kMinSlotBytes) ||
      options.slot_bytes > static_cast<int>(ring::kMaxSlotBytes) ||
      options.slot_bytes % 64 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ring slot_bytes is ", options.slot_bytes, "; expected a multiple of ",
        "64 in ", ring::kMinSlotBytes, "..", ring::kMaxSlotBytes));
  }
  const auto slots = static_cast<uint32_t>(options.slots);
  const auto slot_bytes = static_cast<uint32_t>(options.slot_bytes);
  absl::StatusOr<std::unique_ptr<SharedMemorySegment>> segment =
      SharedMemorySegment::Create(
          static_cast<int64_t>(ring::RingBytes(slots, slot_bytes)),
          options.shm_prefix);
  if (!segment.ok()) return segment.status();
  // The object reads as zeros: every atomic starts at 0, every slot kFree.
  ring::RingView((*segment)->data(), slots, slot_bytes).WriteRingHeader();

  std::unique_ptr<RequestRing> ring =
      absl::WrapUnique(new RequestRing(client, options, *std::move(segment)));
  v1::AttachRingRequest request;
  request.set_session_id(session.session_id());
  request.set_shm_name(ring->segment_->name());
  request.set_slot_count(slots);
  request.set_slot_bytes(slot_bytes);
  ring->stream_ = std::make_unique<Stream>(
      [&client](grpc::ClientContext* context,
                const v1::AttachRingRequest* request,
                grpc::ClientReadReactor<v1::RingEvent>* reactor) {
        client.stub().async()->AttachRing(context, request, reactor);
      },
      std::move(request), client.options().wait_for_ready);
  // The first event says the daemon polls the ring.
  if (absl::StatusOr<v1::RingEvent> attached =
          ring->stream_->WaitForFirstEvent(timeout, "AttachRing");
      !attached.ok()) {
    return attached.status();  // the destructor ends the stream
  }
  // The daemon holds its own mapping now; no one else may open the name.
  ring->segment_->Unlink();
  ring->completion_thread_ =
      std::thread([raw = ring.get()] { raw->CompleteLoop(); });
  return ring;
}

RequestRing::RequestRing(Client& client, const RequestRingOptions& options,
                         std::unique_ptr<SharedMemorySegment> segment)
    : client_(client),
      options_(options),
      segment_(std::move(segment)),
      protocol_(ring::RingView(segment_->data(),
                               static_cast<uint32_t>(options.slots),
                               static_cast<uint32_t>(options.slot_bytes))),
      pending_(options.slots) {
  for (int slot = options.slots - 1; slot >= 0; --slot) {
    free_.push_back(static_cast<uint32_t>(slot));
  }
}

RequestRing::~RequestRing() {
  if (stream_ != nullptr) stream_->CancelAndWait();
  stopping_.store(true);
  if (completion_thread_.joinable()) {
    // A wake-up alone is lost when the completion thread is between its
    // stopping_ check and its FutexWait: it would sleep out the wait's
    // timeout. Changing the futex word makes that wait return at once; the
    // thread re-checks stopping_ after it loads the word (seq_cst on both
    // sides, a store then a load each: Dekker).
    protocol_.InterruptCompletionSleep();
    completion_thread_.join();
  }
  FailAsync(absl::InfiniteFuture(), /*all=*/true,
            absl::CancelledError("the request ring was destroyed"));
}

absl::Status RequestRing::NoFreeSlot(absl::Duration timeout) const {
  return absl::DeadlineExceededError(absl::StrCat(
      "no ring slot became free within ", absl::FormatDuration(timeout),
      " (all ", options_.slots, " in flight)"));
}

bool RequestRing::attached() const { return !stream_->ended(); }

bool RequestRing::NeedsGrpc(const v1::MatmulRequest& request) const {
  // A product list's outputs are all in regions or scratch.
  const bool inline_output =
      request.products_size() == 0 && !request.c().has_region();
  return inline_output ||
         request.ByteSizeLong() > protocol_.view().payload_bytes();
}

absl::StatusOr<v1::MatmulResponse> RequestRing::Matmul(
    const v1::MatmulRequest& request, absl::Duration timeout) {
  v1::MatmulResponse response;
  if (absl::Status status = Call(request, &response, timeout); !status.ok()) {
    return status;
  }
  return response;
}

std::optional<uint32_t> RequestRing::AcquireSlot(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (true) {
    for (size_t i = 0; i < abandoned_.size();) {
      if (protocol_.Done(abandoned_[i])) {
        protocol_.Free(abandoned_[i]);
        free_.push_back(abandoned_[i]);
        abandoned_[i] = abandoned_.back();
        abandoned_.pop_back();
      } else {
        ++i;
      }
    }
    if (!free_.empty()) {
      const uint32_t slot = free_.back();
      free_.pop_back();
      return slot;
    }
    if (absl::Now() >= deadline) return std::nullopt;
    // Slots come back through ReleaseSlot or FinishAsync (the condition is
    // evaluated then) or, abandoned ones, when the daemon answers them:
    // look again shortly.
    mu_.AwaitWithTimeout(
        absl::Condition(
            +[](std::vector<uint32_t>* free) { return !free->empty(); },
            &free_),
        absl::Milliseconds(1));
  }
}

void RequestRing::ReleaseSlot(uint32_t slot) {
  absl::MutexLock lock(&mu_);
  free_.push_back(slot);
}

void RequestRing::Submit(uint32_t slot, const v1::MatmulRequest& request,
                         absl::Duration timeout, bool notify) {
  // ByteSizeLong (in NeedsGrpc) cached the sizes this serialization uses.
  request.SerializeWithCachedSizesToArray(
      reinterpret_cast<uint8_t*>(protocol_.view().payload(slot)));
  protocol_.Submit(slot, static_cast<uint32_t>(request.GetCachedSize()),
                   absl::ToInt64Nanoseconds(timeout), notify);
}

bool RequestRing::WaitForAnswer(uint32_t slot, absl::Time deadline) {
  const absl::Time spin_until = absl::Now() + options_.spin;
  absl::Time detached_at = absl::InfiniteFuture();
  while (!protocol_.Done(slot)) {
    const absl::Time now = absl::Now();
    if (now < spin_until) {
      ring::CpuRelax();
      continue;
    }
    if (now >= deadline) return false;
    // Once the daemon detached, what it still runs gets kDetachGrace.
    if (detached_at == absl::InfiniteFuture() && stream_->ended()) {
      detached_at = now;
    }
    if (now - detached_at > kDetachGrace) return false;
    protocol_.SleepUntilDone(slot,
                             std::min(deadline - now, absl::Milliseconds(10)));
  }
  return true;
}

absl::Status RequestRing::ReadAnswer(uint32_t slot,
                                     v1::MatmulResponse* response) {
  const ring::RingView& view = protocol_.view();
  const uint32_t bytes = view.ResponseBytes(slot);
  if (bytes > view.payload_bytes() ||
      !response->ParseFromArray(view.payload(slot), static_cast<int>(bytes))) {
    return absl::InternalError(absl::StrCat("the daemon's answer in ring slot ",
                                            slot, " (", bytes,
                                            " bytes) is not a MatmulResponse"));
  }
  return ResponseStatus(*response);
}

absl::Status RequestRing::Call(const v1::MatmulRequest& request,
                               v1::MatmulResponse* response,
                               absl::Duration timeout) {
  if (NeedsGrpc(request)) {
    absl::StatusOr<v1::MatmulResponse> answer =
        client_.Matmul(request, timeout);
    if (!answer.ok()) return answer.status();
    *response = *std::move(answer);
    return absl::OkStatus();
  }
  if (timeout <= absl::ZeroDuration()) {
    return TimeoutPassedBeforeSending();
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::optional<uint32_t> slot = AcquireSlot(deadline);
  if (!slot.has_value()) {
    return NoFreeSlot(timeout);
  }
  Submit(*slot, request, timeout, /*notify=*/false);
  if (!WaitForAnswer(*slot, deadline)) {
    absl::MutexLock lock(&mu_);
    abandoned_.push_back(*slot);
    if (stream_->ended()) {
      return absl::UnavailableError(
          "the daemon detached the request ring (it is shutting down or "
          "restarted) before it answered");
    }
    return absl::DeadlineExceededError(
        absl::StrCat("no answer over the request ring within ",
                     absl::FormatDuration(timeout)));
  }
  absl::Status status = ReadAnswer(*slot, response);
  protocol_.Free(*slot);
  ReleaseSlot(*slot);
  return status;
}

void RequestRing::CallAsync(const v1::MatmulRequest& request,
                            v1::MatmulResponse* response,
                            absl::Duration timeout, Callback done) {
  if (NeedsGrpc(request)) {
    client_.MatmulAsync(request, timeout,
                        [response, done = std::move(done)](
                            absl::StatusOr<v1::MatmulResponse> answer) mutable {
                          if (answer.ok()) *response = *std::move(answer);
                          std::move(done)(answer.status());
                        });
    return;
  }
  if (timeout <= absl::ZeroDuration()) {
    std::move(done)(TimeoutPassedBeforeSending());
    return;
  }
  const absl::Time deadline = absl::Now() + timeout;
  // The completion thread frees the slots, so it must never wait for one:
  // a call it makes (from a callback) waits in a queue instead when all
  // slots are in flight, and goes out as the next answer frees one.
  const bool on_completion_thread =
      std::this_thread::get_id() == completion_thread_.get_id();
  std::optional<uint32_t> slot =
      AcquireSlot(on_completion_thread ? absl::InfinitePast() : deadline);
  if (!slot.has_value() && on_completion_thread) {
    absl::MutexLock lock(&mu_);
    deferred_.push_back({request, response, deadline, std::move(done)});
    return;
  }
  if (!slot.has_value()) {
    std::move(done)(NoFreeSlot(timeout));
    return;
  }
  SubmitAsync(*slot, request, response, deadline, std::move(done));
}

void RequestRing::SubmitAsync(uint32_t slot, const v1::MatmulRequest& request,
                              v1::MatmulResponse* response, absl::Time deadline,
                              Callback done) {
  {
    absl::MutexLock lock(&mu_);
    Pending& pending = pending_[slot];
    pending.active = true;
    pending.abandoned = false;
    pending.response = response;
    pending.deadline = deadline;
    pending.done = std::move(done);
  }
  async_in_flight_.fetch_add(1);
  // The timeout left is at least 1 ns: 0 would tell the daemon "none".
  Submit(slot, request, std::max(deadline - absl::Now(), absl::Nanoseconds(1)),
         /*notify=*/true);
}

void RequestRing::SubmitDeferred() {
  while (true) {
    Deferred next;
    std::optional<uint32_t> slot;
    {
      absl::MutexLock lock(&mu_);
      if (deferred_.empty() || free_.empty()) return;
      next = std::move(deferred_.front());
      deferred_.pop_front();
      slot = free_.back();
      free_.pop_back();
    }
    next.request.ByteSizeLong();  // Submit serializes with cached sizes
    SubmitAsync(*slot, next.request, next.response, next.deadline,
                std::move(next.done));
  }
}

void RequestRing::CompleteLoop() {
  absl::Time last_answer = absl::Now();
  absl::Time last_sweep = last_answer;
  absl::Time detached_at = absl::InfiniteFuture();
  while (!stopping_.load(std::memory_order_relaxed)) {
    if (const std::optional<uint32_t> slot = protocol_.TakeCompletion()) {
      if (*slot < static_cast<uint32_t>(options_.slots)) {
        FinishAsync(*slot);
        SubmitDeferred();
      }
      last_answer = absl::Now();
      continue;
    }
    const absl::Time now = absl::Now();
    if (now - last_sweep > absl::Milliseconds(1)) {
      last_sweep = now;
      FailAsync(now, /*all=*/false,
                absl::DeadlineExceededError(
                    "no answer over the request ring before the deadline"));
      if (detached_at == absl::InfiniteFuture() && stream_->ended()) {
        detached_at = now;
      }
      // Once the daemon detached, what it still runs gets kDetachGrace.
      if (now - detached_at > kDetachGrace) {
        FailAsync(now, /*all=*/true,
                  absl::UnavailableError(
                      "the daemon detached the request ring (it is shutting "
                      "down or restarted) before it answered"));
      }
    }
    if (now - last_answer < options_.spin) {
      ring::CpuRelax();
      continue;
    }
    // Deadlines are checked every few milliseconds while calls are out.
    protocol_.SleepUntilCompletion(async_in_flight_.load() > 0
                                       ? absl::Milliseconds(5)
                                       : absl::Milliseconds(100),
                                   &stopping_);
  }
}

void RequestRing::FinishAsync(uint32_t slot) {
  Callback done;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    Pending& pending = pending_[slot];
    if (!pending.active) return;  // not ours: a stray entry
    if (!pending.abandoned) {
      status = ReadAnswer(slot, pending.response);
      done = std::move(pending.done);
    }
    pending = Pending();
    protocol_.Free(slot);
    free_.push_back(slot);
  }
  async_in_flight_.fetch_sub(1);
  if (done) std::move(done)(std::move(status));
}

void RequestRing::FailAsync(absl::Time now, bool all,
                            const absl::Status& status) {
  std::vector<Callback> failed;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = deferred_.begin(); it != deferred_.end();) {
      if (all || it->deadline < now) {
        failed.push_back(std::move(it->done));
        it = deferred_.erase(it);
      } else {
        ++it;
      }
    }
    for (Pending& pending : pending_) {
      if (pending.active && !pending.abandoned &&
          (all || pending.deadline < now)) {
        // The slot stays the daemon's until its answer arrives.
        pending.abandoned = true;
        failed.push_back(std::move(pending.done));
      }
    }
  }
  for (Callback& done : failed) std::move(done)(status);
}

}  // namespace matmul
