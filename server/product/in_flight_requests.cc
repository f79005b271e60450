#include "server/product/in_flight_requests.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace matmul {
namespace {

const char* StageName(InFlightRequest::Stage stage) {
  switch (stage) {
    case InFlightRequest::Stage::kQueued:
      return "queued";
    case InFlightRequest::Stage::kRunning:
      return "running";
    case InFlightRequest::Stage::kAnswering:
      return "answering";
  }
  return "unknown";
}

}  // namespace

InFlightRequest::InFlightRequest(InFlightRequests& table, uint64_t id,
                                 std::string origin, std::string shape,
                                 absl::Time accepted,
                                 absl::AnyInvocable<void(absl::Status) &&> done)
    : table_(table),
      id_(id),
      origin_(std::move(origin)),
      shape_(std::move(shape)),
      accepted_(accepted),
      stage_since_ns_(absl::ToUnixNanos(absl::Now())),
      done_(std::move(done)) {}

InFlightRequest::~InFlightRequest() {
  if (state_.load() != kAnswered) table_.Remove(id_);
}

void InFlightRequest::SetStage(Stage stage) {
  stage_since_ns_.store(absl::ToUnixNanos(absl::Now()),
                        std::memory_order_relaxed);
  stage_.store(stage, std::memory_order_relaxed);
}

bool InFlightRequest::ClaimForWriting() {
  int open = kOpen;
  if (!state_.compare_exchange_strong(open, kClaimed)) return false;
  SetStage(Stage::kAnswering);
  return true;
}

void InFlightRequest::Answer(absl::Status status) {
  int open = kOpen;
  // Claimed by this caller already, or claimed now; otherwise the drain
  // answered it.
  if (state_.load() != kClaimed &&
      !state_.compare_exchange_strong(open, kClaimed)) {
    return;
  }
  Finish(std::move(status));
}

bool InFlightRequest::GiveUp(absl::Status status) {
  int open = kOpen;
  if (!state_.compare_exchange_strong(open, kClaimed)) return false;
  Finish(std::move(status));
  return true;
}

void InFlightRequest::Finish(absl::Status status) {
  table_.Remove(id_);
  state_.store(kAnswered);
  std::move(done_)(std::move(status));
}

std::string InFlightRequest::Describe(absl::Time now) const {
  const absl::Time since =
      absl::FromUnixNanos(stage_since_ns_.load(std::memory_order_relaxed));
  return absl::StrFormat(
      "request %d %s for %.3fs (accepted %.3fs ago) shape=%s from %s", id_,
      StageName(stage_.load(std::memory_order_relaxed)),
      absl::ToDoubleSeconds(now - since),
      absl::ToDoubleSeconds(now - accepted_), shape_, origin_);
}

std::shared_ptr<InFlightRequest> InFlightRequests::Add(
    std::string origin, std::string shape, absl::Time accepted,
    absl::AnyInvocable<void(absl::Status) &&> done) {
  absl::ReleasableMutexLock lock(&mu_);
  if (given_up_.has_value()) {
    const absl::Status status = *given_up_;
    lock.Release();
    std::move(done)(status);
    return nullptr;
  }
  auto request = std::make_shared<InFlightRequest>(
      *this, next_id_++, std::move(origin), std::move(shape), accepted,
      std::move(done));
  requests_.emplace(request->id(), request);
  return request;
}

void InFlightRequests::Remove(uint64_t id) {
  absl::MutexLock lock(&mu_);
  requests_.erase(id);
}

namespace {

// The live requests of `requests`, oldest first.
std::vector<std::shared_ptr<InFlightRequest>> Live(
    const absl::flat_hash_map<uint64_t, std::weak_ptr<InFlightRequest>>&
        requests) {
  std::vector<std::shared_ptr<InFlightRequest>> live;
  live.reserve(requests.size());
  for (const auto& [id, weak] : requests) {
    if (std::shared_ptr<InFlightRequest> request = weak.lock()) {
      live.push_back(std::move(request));
    }
  }
  std::sort(live.begin(), live.end(),
            [](const auto& a, const auto& b) { return a->id() < b->id(); });
  return live;
}

}  // namespace

std::string InFlightRequests::GiveUpAll(const absl::Status& status) {
  std::vector<std::shared_ptr<InFlightRequest>> live;
  {
    absl::MutexLock lock(&mu_);
    given_up_ = status;
    live = Live(requests_);
  }
  // Described before the answer, which ends the request.
  const absl::Time now = absl::Now();
  std::string given_up;
  for (const std::shared_ptr<InFlightRequest>& request : live) {
    std::string line = request->Describe(now);
    if (request->GiveUp(status)) absl::StrAppend(&given_up, line, "\n");
  }
  return given_up;
}

std::string InFlightRequests::Render() const {
  std::vector<std::shared_ptr<InFlightRequest>> live;
  {
    absl::MutexLock lock(&mu_);
    live = Live(requests_);
  }
  const absl::Time now = absl::Now();
  std::string page = absl::StrCat(live.size(), " requests in flight\n");
  for (const std::shared_ptr<InFlightRequest>& request : live) {
    absl::StrAppend(&page, request->Describe(now), "\n");
  }
  return page;
}

int InFlightRequests::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(requests_.size());
}

}  // namespace matmul
