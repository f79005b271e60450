// ring_chaos: a client that writes its own request ring wrong. On a ring
// of its own (attached through RequestRing, then written raw: raw_ring.h)
// it publishes the submission queue out of sequence (a hole filled later,
// a stale sequence number corrected later, an entry naming a slot out of
// range or one not in kSubmitted, one slot at two positions) and fills
// slots with garbage (bytes that are no MatmulRequest, a request_bytes
// past the payload, random timeouts). Then it sends a good request, raw
// and through RequestRing, and checks both answers.
//
// What the daemon must do (common/request_ring_layout.h): answer garbage
// with INVALID_ARGUMENT, run each good request once and right, take
// nothing it should skip (a slot not submitted stays as it was), take
// nothing past an unpublished entry, and keep serving the ring.
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/soak/raw_ring.h"
#include "tests/soak/soak_worker.h"

namespace matmul::soak {
namespace {

using absl::StatusCode;

constexpr char kScenario[] = "ring_chaos";
constexpr uint32_t kSlots = 32;
constexpr uint32_t kSlotBytes = 2048;
// Good products in one step, each on its own slice of the region: at most
// two per act, four to seven acts, and the final ones.
constexpr int kMaxGood = 16;
// Small products (M, N, K up to kMaxDim): the step is about the ring.
constexpr int64_t kMaxDim = 24;
// Region bytes one of them can need: three operands of up to
// 4 x kMaxDim x (kMaxDim + 8) FP32 elements, each 64-byte aligned.
constexpr uint64_t kProductBytes = 3 * (4 * 4 * kMaxDim * (kMaxDim + 8) + 64);

// A slot the step wrote, and what its answer may be.
struct Sent {
  uint32_t slot = 0;
  std::string what;
  // -1: garbage (no product to check); else an index into `placed`.
  int good = -1;
  std::vector<StatusCode> expected;
  bool notify = false;
};

// A slot published while not in kSubmitted: it must stay as written.
struct Skipped {
  uint32_t slot = 0;
  std::string what;
  uint32_t state = 0;
  uint32_t response_bytes = 0;
};

// A header field nobody would write: the daemon writes response_bytes
// when it answers, so a changed value means it did.
constexpr uint32_t kUntouched = 0xfeedbeef;

}  // namespace

void SoakWorker::RingChaos() {
  if (!EnsureSession()) return;
  const uint64_t stride = AlignRegionOffset(kProductBytes);
  absl::StatusOr<std::unique_ptr<SharedMemorySegment>> segment =
      SharedMemorySegment::Create(static_cast<int64_t>(stride * kMaxGood),
                                  options_.shm_prefix);
  if (!segment.ok())
    return tally().Fail(kScenario, segment.status().ToString());
  absl::StatusOr<std::unique_ptr<RegisteredRegion>> region =
      RegisteredRegion::RegisterShm(*client_, *session_, **segment, 0, 0,
                                    options_.call_timeout);
  (*segment)->Unlink();
  if (!tally().Record("setup", "RegisterRegion(shm)", region.status(),
                      {StatusCode::kOk})) {
    return;
  }
  RequestRingOptions ring_options;
  ring_options.slots = kSlots;
  ring_options.slot_bytes = kSlotBytes;
  ring_options.shm_prefix = options_.shm_prefix;
  absl::StatusOr<std::unique_ptr<RequestRing>> ring = RequestRing::Attach(
      *client_, *session_, ring_options, options_.call_timeout);
  tally().Record("setup", "AttachRing", ring.status(),
                 {StatusCode::kOk, StatusCode::kResourceExhausted});
  if (!ring.ok()) return tally().Count(kScenario, "no_ring");
  absl::StatusOr<Mapping> mapping = FindMapping((*ring)->shm_name());
  if (!mapping.ok())
    return tally().Fail(kScenario, mapping.status().ToString());
  absl::StatusOr<RawRing> opened = RawRing::Open(*mapping, kSlots, kSlotBytes);
  if (!opened.ok()) return tally().Fail(kScenario, opened.status().ToString());
  RawRing& raw = *opened;

  // Raw slots come from the top; RequestRing hands out slot 0 first, so the
  // final call through it takes a slot this step never wrote.
  uint32_t next_slot = kSlots - 1;
  std::vector<RegionRequest> placed;
  std::vector<Sent> sent;
  std::vector<Skipped> skipped;
  bool broken = false;  // a setup failure: stop writing, still read answers

  // A good product (all operands in the region, so it fits a slot).
  auto good_request = [&]() -> int {
    if (placed.size() >= kMaxGood) return -1;
    absl::StatusOr<RegionRequest> one = MakeRandomRegionRequest(
        RandomSpec(1, kMaxDim), rng_, (*segment)->bytes(), (*region)->id(),
        session_->session_id(),
        RegionPlacement{.a = true, .b = true, .c = true},
        stride * placed.size());
    if (!one.ok()) {
      tally().Fail(kScenario, one.status().ToString());
      broken = true;
      return -1;
    }
    placed.push_back(*std::move(one));
    return static_cast<int>(placed.size()) - 1;
  };
  // Writes good product `good` into a fresh slot; the slot, or -1.
  auto write_good = [&](int good, int64_t timeout_ns, bool notify,
                        std::string what,
                        std::vector<StatusCode> expected) -> int64_t {
    const uint32_t slot = next_slot--;
    if (!raw.WriteRequest(slot, placed[good].request, timeout_ns, notify)) {
      tally().Fail(kScenario, "a region request does not fit a ring slot");
      broken = true;
      return -1;
    }
    sent.push_back({slot, std::move(what), good, std::move(expected), notify});
    return slot;
  };
  auto still_submitted = [&](uint32_t slot, absl::string_view what) {
    if (raw.slot(slot)->state.load(std::memory_order_acquire) !=
        ring::kSubmitted) {
      tally().Fail(kScenario,
                   absl::StrCat(what, ": the daemon took slot ", slot,
                                " from an entry that was "
                                "not published yet"));
    }
  };
  const std::vector<StatusCode> kOk = {StatusCode::kOk};

  const int acts = 4 + static_cast<int>(rng_() % 4);
  for (int act = 0; act < acts && !broken && next_slot >= 4; ++act) {
    switch (rng_() % 8) {
      case 0: {  // bytes that are no MatmulRequest
        const uint32_t slot = next_slot--;
        std::string garbage(1 + rng_() % raw.payload_bytes(), '\0');
        for (char& c : garbage) c = static_cast<char>(rng_());
        // Field 1..15 with wire type 7, which does not exist: never parses.
        garbage[0] = static_cast<char>(((1 + rng_() % 15) << 3) | 7);
        const bool notify = rng_() % 2;
        raw.WriteSlot(slot, garbage, static_cast<uint32_t>(garbage.size()), 0,
                      notify);
        sent.push_back({slot,
                        "garbage payload",
                        -1,
                        {StatusCode::kInvalidArgument},
                        notify});
        raw.Publish(raw.Reserve(), slot);
        break;
      }
      case 1: {  // request_bytes past the payload
        const int good = good_request();
        if (good < 0) break;
        const uint32_t slot = next_slot--;
        const std::string bytes = placed[good].request.SerializeAsString();
        const uint32_t lie = rng_() % 2
                                 ? std::numeric_limits<uint32_t>::max()
                                 : raw.payload_bytes() + 1 +
                                       static_cast<uint32_t>(rng_() % 100000);
        const bool notify = rng_() % 2;
        raw.WriteSlot(slot, bytes, lie, 0, notify);
        sent.push_back({slot,
                        absl::StrCat("request_bytes ", lie),
                        -1,
                        {StatusCode::kInvalidArgument},
                        notify});
        raw.Publish(raw.Reserve(), slot);
        break;
      }
      case 2: {  // a random timeout
        const int good = good_request();
        if (good < 0) break;
        const int64_t kTimeouts[] = {
            0,
            -1,
            std::numeric_limits<int64_t>::min(),
            std::numeric_limits<int64_t>::max(),
            1,
            static_cast<int64_t>(rng_() % 2000000),
            -static_cast<int64_t>(rng_() % 2000000000)};
        const int64_t timeout = kTimeouts[rng_() % std::size(kTimeouts)];
        // None (0 or negative) or longer than any product: it runs.
        std::vector<StatusCode> expected = kOk;
        if (timeout > 0 && timeout < 10'000'000'000) {
          expected.push_back(StatusCode::kDeadlineExceeded);
        }
        const int64_t slot = write_good(good, timeout, rng_() % 2,
                                        absl::StrCat("timeout_ns ", timeout),
                                        std::move(expected));
        if (slot >= 0) raw.Publish(raw.Reserve(), static_cast<uint32_t>(slot));
        break;
      }
      case 3: {  // a hole: the later position published first
        const int first = good_request();
        const int second = good_request();
        if (first < 0 || second < 0) break;
        const int64_t slot1 =
            write_good(first, 0, rng_() % 2, "out of order (first)", kOk);
        const int64_t slot2 =
            write_good(second, 0, rng_() % 2, "out of order (second)", kOk);
        if (slot1 < 0 || slot2 < 0) break;
        const uint64_t position = raw.Reserve(2);
        raw.Publish(position + 1, static_cast<uint32_t>(slot2));
        absl::SleepFor(RandomDelay(absl::Milliseconds(2)));
        still_submitted(static_cast<uint32_t>(slot2), "a hole before it");
        raw.Publish(position, static_cast<uint32_t>(slot1));
        break;
      }
      case 4: {  // a stale sequence number, corrected later
        const int good = good_request();
        if (good < 0) break;
        const int64_t slot = write_good(good, 0, rng_() % 2,
                                        "stale sequence, then corrected", kOk);
        if (slot < 0) break;
        const uint64_t position = raw.Reserve();
        // The previous position's number, or the one a lap before.
        const uint64_t stale =
            rng_() % 2 || position < kSlots ? position : position + 1 - kSlots;
        raw.Publish(position, static_cast<uint32_t>(slot), stale);
        absl::SleepFor(RandomDelay(absl::Milliseconds(2)));
        still_submitted(static_cast<uint32_t>(slot), "a stale sequence");
        raw.Publish(position, static_cast<uint32_t>(slot));
        break;
      }
      case 5: {  // a slot out of range
        const uint32_t kBad[] = {kSlots, kSlots + 1 + (uint32_t)(rng_() % 1000),
                                 std::numeric_limits<uint32_t>::max()};
        raw.Publish(raw.Reserve(), kBad[rng_() % std::size(kBad)]);
        tally().Count(kScenario, "slot_out_of_range");
        break;
      }
      case 6: {  // a slot not in kSubmitted, with a good request in it
        const int good = good_request();
        if (good < 0) break;
        const uint32_t slot = next_slot--;
        const uint32_t kStates[] = {ring::kFree, ring::kDone, 7, 0xdeadbeef};
        const uint32_t state = kStates[rng_() % std::size(kStates)];
        raw.WriteSlot(
            slot, placed[good].request.SerializeAsString(),
            static_cast<uint32_t>(placed[good].request.ByteSizeLong()), 0,
            rng_() % 2, state);
        raw.slot(slot)->response_bytes = kUntouched;
        skipped.push_back({slot, absl::StrCat("published in state ", state),
                           state, kUntouched});
        raw.Publish(raw.Reserve(), slot);
        break;
      }
      case 7: {  // one slot at two positions
        const int good = good_request();
        if (good < 0) break;
        const int64_t slot =
            write_good(good, 0, /*notify=*/true, "published twice", kOk);
        if (slot < 0) break;
        const uint64_t position = raw.Reserve(2);
        raw.Publish(position, static_cast<uint32_t>(slot));
        if (rng_() % 2) absl::SleepFor(RandomDelay(absl::Milliseconds(1)));
        raw.Publish(position + 1, static_cast<uint32_t>(slot));
        break;
      }
    }
  }

  // The last raw request: once it is answered, the daemon has passed
  // every entry before it.
  const int last = broken ? -1 : good_request();
  if (last >= 0) {
    const int64_t slot = write_good(last, 0, rng_() % 2, "good, last", kOk);
    if (slot >= 0) raw.Publish(raw.Reserve(), static_cast<uint32_t>(slot));
  }

  const absl::Time deadline = absl::Now() + options_.call_timeout;
  bool all_answered = true;
  for (const Sent& one : sent) {
    if (!raw.WaitDone(one.slot, deadline)) {
      all_answered = false;
      tally().Fail(kScenario,
                   absl::StrCat(one.what, ": ring slot ", one.slot,
                                " not answered within ",
                                absl::FormatDuration(options_.call_timeout)));
      continue;
    }
    v1::MatmulResponse response;
    const absl::Status status = raw.ReadAnswer(one.slot, &response);
    const absl::Span<const StatusCode> expected(one.expected);
    bool allowed = false;
    for (StatusCode code : expected) allowed |= status.code() == code;
    if (!allowed) {
      // Counted and reported as the tally does.
      tally().Record(kScenario, one.what, status, {});
    } else {
      tally().Record(kScenario, one.what, status, {status.code()});
    }
    if (allowed && status.ok() && one.good >= 0) {
      CheckRegion(kScenario, placed[one.good], response, (*segment)->bytes());
    }
  }
  // Answered once each: a slot published twice must not run twice. Each
  // notify slot's answer is announced in the completion queue (just after
  // its state turns kDone: wait for the entries); a second run would
  // announce it again. A step writes fewer entries than a lap.
  int notified = 0;
  for (const Sent& one : sent) notified += one.notify ? 1 : 0;
  uint64_t completed = 0;
  const absl::Time announced_by = absl::Now() + absl::Seconds(5);
  for (;;) {
    completed = raw.header()->complete_tail.load(std::memory_order_acquire);
    bool published = completed >= static_cast<uint64_t>(notified);
    for (uint64_t position = 0;
         published && position < completed && position < kSlots; ++position) {
      published =
          ring::CompleteQueue(mapping->data, kSlots)[position].sequence.load(
              std::memory_order_acquire) == position + 1;
    }
    if (published || absl::Now() > announced_by) break;
    absl::SleepFor(absl::Microseconds(200));
  }
  if (all_answered && completed != static_cast<uint64_t>(notified)) {
    tally().Fail(kScenario, absl::StrCat(completed,
                                         " answers announced in the "
                                         "completion queue for ",
                                         notified, " notify slots"));
  }
  for (const Sent& one : sent) {
    if (!one.notify || completed > kSlots) continue;
    if (const int times = raw.CompletionsOf(one.slot, 0, completed);
        times != 1 && all_answered) {
      tally().Fail(kScenario, absl::StrCat(one.what, ": ring slot ", one.slot,
                                           " was announced ", times,
                                           " times in the completion queue"));
    }
  }
  if (all_answered) {
    for (const Skipped& one : skipped) {
      const ring::SlotHeader* header = raw.slot(one.slot);
      const uint32_t state = header->state.load(std::memory_order_acquire);
      if (state != one.state || header->response_bytes != one.response_bytes) {
        tally().Fail(
            kScenario,
            absl::StrCat(one.what, ": the daemon answered ring slot ", one.slot,
                         " (state ", state, ", response_bytes ",
                         header->response_bytes, ")"));
      } else {
        tally().Count(kScenario, "skipped_as_it_should");
      }
    }
  }
  if (broken || !all_answered) return;

  // And the ring still works for a client that does everything right.
  const int final_good = good_request();
  if (final_good < 0) return;
  absl::StatusOr<v1::MatmulResponse> response =
      (*ring)->Matmul(placed[final_good].request, options_.call_timeout);
  if (tally().Record(kScenario, "good request through RequestRing after",
                     response.status(), {StatusCode::kOk}) &&
      response.ok()) {
    CheckRegion(kScenario, placed[final_good], *response, (*segment)->bytes());
  }
}

}  // namespace matmul::soak
