// A soak client that is meant to die: it opens a session, registers shm
// regions, attaches a request ring and keeps products in flight on them
// (over gRPC and through the ring) until matmul-soak kills it with SIGKILL,
// at a random moment anywhere in that sequence. The daemon must then
// release everything the process held.
//
// With "truncate_ring" it also truncates its own ring's segment to 0 bytes
// once requests are in it: the daemon, which polls the ring, must survive
// that. Its own threads then fault on the ring too; each is parked in the
// SIGBUS handler, so the process (and its session and ring) lives on until
// it is killed.
// The segment is unlinked by then; it is reached through
// /proc/self/map_files, which needs CAP_SYS_ADMIN: without it the holder
// exits with status 3.
//
// With "ring_busy" (the ring_kill scenario) it keeps one ring full
// instead: threads that each wait on a synchronous call (waiting slots),
// asynchronous calls that re-send themselves as they are answered (notify
// slots), and a thread that writes the submission queue out of sequence
// beside them (raw_ring.h): entries naming a slot a second time or one out
// of range, positions left empty for a while (the daemon waits at the
// hole, so the ring's later requests queue up behind it) and stale
// sequence numbers corrected later. The kill finds requests running,
// queued behind a hole, and answered but not yet read.
//
// With "share" (the shared_kill scenario) it owns a weight instead: the B of
// ProductsOverOneWeight(SEED, MAX_DIM) in a shm region it registers and
// shares with its own user (ShareRegion), the token printed as one line on
// stdout; then it waits for the kill while others run products over it.
//
//   soak_holder TARGET SHM_PREFIX SEED MAX_DIM [truncate_ring|ring_busy|share]
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <fstream>
#include <future>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "client/regions/region_request_builder.h"
#include "client/regions/registered_region.h"
#include "client/regions/shared_memory_segment.h"
#include "client/request_builder.h"
#include "client/ring/request_ring.h"
#include "client/session.h"
#include "tests/soak/raw_ring.h"
#include "tests/soak/weight_products.h"

namespace matmul::soak {
namespace {

constexpr int kInFlight = 4;

int Fail(const char* what, const absl::Status& status) {
  std::cerr << "soak_holder: " << what << ": " << status << "\n";
  return 1;
}

constexpr int kNoMapFiles = 3;

// A thread that touched the truncated ring stays here: returning would
// fault again, and dying would end the session the daemon must keep
// serving. Only async-signal-safe calls.
void ParkFaultingThread(int) {
  for (;;) pause();
}

// Truncates the shm object /dev/shm/<name> that this process maps (and
// may have unlinked) to 0 bytes; false when it cannot be reached.
bool TruncateMapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  const std::string path = "/dev/shm/" + name;
  for (std::string line; std::getline(maps, line);) {
    if (line.find(path) == std::string::npos) continue;
    const std::string range = line.substr(0, line.find(' '));
    const int fd =
        open(absl::StrCat("/proc/self/map_files/", range).c_str(), O_RDWR);
    if (fd < 0) return false;
    const bool truncated = ftruncate(fd, 0) == 0;
    close(fd);
    return truncated;
  }
  return false;
}

// Never returns: the holder lives until it is killed.
[[noreturn]] void WaitForTheKill() {
  for (;;) pause();
}

// ring_busy: see the top of the file.
int RingBusy(Client& client, const Session& session, const std::string& prefix,
             std::mt19937_64& rng, int64_t max_dim) {
  constexpr int kSlots = 32;
  constexpr int kWaiters = 4;
  constexpr int kAsync = 24;  // more than the slots left: some queue
  constexpr int kLanes = kWaiters + kAsync;
  const int64_t dim = std::min<int64_t>(max_dim, 48);
  const uint64_t stride = AlignRegionOffset(
      static_cast<uint64_t>(3 * (4 * 4 * dim * (dim + 8) + 64)));
  absl::StatusOr<std::unique_ptr<SharedMemorySegment>> segment =
      SharedMemorySegment::Create(static_cast<int64_t>(stride * kLanes),
                                  prefix);
  if (!segment.ok()) return Fail("creating a segment", segment.status());
  absl::StatusOr<std::unique_ptr<RegisteredRegion>> region =
      RegisteredRegion::RegisterShm(client, session, **segment);
  (*segment)->Unlink();
  if (!region.ok()) return Fail("RegisterRegion", region.status());
  RequestRingOptions ring_options;
  ring_options.slots = kSlots;
  ring_options.shm_prefix = prefix;
  absl::StatusOr<std::unique_ptr<RequestRing>> ring =
      RequestRing::Attach(client, session, ring_options);
  // No ring left is an answer the daemon may give: hold the rest.
  if (absl::IsResourceExhausted(ring.status())) WaitForTheKill();
  if (!ring.ok()) return Fail("AttachRing", ring.status());
  absl::StatusOr<Mapping> mapping = FindMapping((*ring)->shm_name());
  if (!mapping.ok()) return Fail("finding the ring", mapping.status());
  absl::StatusOr<RawRing> raw = RawRing::Open(*mapping, kSlots, 2048);
  if (!raw.ok()) return Fail("opening the ring", raw.status());

  // One product per lane, on the lane's slice, sent again and again.
  std::uniform_int_distribution<int64_t> side(1, dim);
  std::vector<v1::MatmulRequest> requests;
  for (int lane = 0; lane < kLanes; ++lane) {
    ProblemSpec spec{.m = side(rng), .n = side(rng), .k = side(rng)};
    absl::StatusOr<RegionRequest> placed = MakeRandomRegionRequest(
        spec, rng, (*segment)->bytes(), (*region)->id(), session.session_id(),
        RegionPlacement{}, stride * static_cast<uint64_t>(lane));
    if (!placed.ok()) return Fail("placing a product", placed.status());
    requests.push_back(std::move(placed->request));
  }

  // The out-of-sequence writer: it owns the positions it reserves and
  // names only slots it never writes (or no slot at all).
  std::thread chaos([raw = *raw, seed = rng()]() mutable {
    std::mt19937_64 rng(seed);
    const uint32_t kNoSlot = std::numeric_limits<uint32_t>::max();
    auto pause_us = [&rng](int max_us) {
      absl::SleepFor(absl::Microseconds(static_cast<int64_t>(rng() % max_us)));
    };
    for (;;) {
      pause_us(3000);
      const uint64_t position = raw.Reserve();
      switch (rng() % 4) {
        case 0:  // a slot named a second time (in flight, free or done)
          raw.Publish(position, static_cast<uint32_t>(rng() % kSlots));
          break;
        case 1:  // out of range
          raw.Publish(position,
                      rng() % 2 ? kNoSlot
                                : kSlots + static_cast<uint32_t>(rng() % 1000));
          break;
        case 2:  // a hole for a while
          pause_us(10000);
          raw.Publish(position, kNoSlot);
          break;
        case 3:  // a stale sequence number, corrected later
          raw.Publish(position, static_cast<uint32_t>(rng() % kSlots),
                      position);
          pause_us(5000);
          raw.Publish(position, kNoSlot);
          break;
      }
    }
  });
  chaos.detach();
  // Waiting slots: a synchronous call each, again and again.
  for (int lane = 0; lane < kWaiters; ++lane) {
    std::thread([&ring, &requests, lane] {
      for (;;) (void)(*ring)->Matmul(requests[lane], absl::Seconds(60));
    }).detach();
  }
  // Notify slots: each answer sends its lane's request again (on the
  // ring's completion thread, which queues it when no slot is free).
  struct Lane {
    RequestRing* ring;
    const v1::MatmulRequest* request;
    v1::MatmulResponse response;
    void Send() {
      ring->CallAsync(*request, &response, absl::Seconds(60),
                      [this](absl::Status) { Send(); });
    }
  };
  std::vector<Lane> lanes(kAsync);
  for (int i = 0; i < kAsync; ++i) {
    lanes[i].ring = ring->get();
    lanes[i].request = &requests[kWaiters + i];
    lanes[i].Send();
  }
  WaitForTheKill();
}

// share: see the top of the file.
int ShareWeight(Client& client, const Session& session,
                const std::string& prefix, uint64_t seed, int64_t max_dim) {
  absl::StatusOr<std::vector<v1::MatmulRequest>> products =
      ProductsOverOneWeight(seed, max_dim, 1);
  if (!products.ok()) return Fail("building the weight", products.status());
  absl::StatusOr<uint64_t> bytes = RegionBytes(products->front());
  if (!bytes.ok()) return Fail("sizing the weight", bytes.status());
  absl::StatusOr<std::unique_ptr<SharedMemorySegment>> segment =
      SharedMemorySegment::Create(static_cast<int64_t>(*bytes), prefix);
  if (!segment.ok()) return Fail("creating a segment", segment.status());
  absl::StatusOr<v1::MatmulRequest> written =
      ReadingTheWeightFrom(products->front(), (*segment)->bytes(), "", "");
  if (!written.ok()) return Fail("writing the weight", written.status());
  absl::StatusOr<std::unique_ptr<RegisteredRegion>> region =
      RegisteredRegion::RegisterShm(client, session, **segment);
  (*segment)->Unlink();
  if (!region.ok()) return Fail("RegisterRegion", region.status());
  absl::StatusOr<std::string> token = (*region)->Share();
  if (!token.ok()) return Fail("ShareRegion", token.status());
  std::cout << *token << std::endl;
  WaitForTheKill();
}

int Main(int argc, char** argv) {
  uint64_t seed = 0;
  int64_t max_dim = 0;
  const std::string mode = argc == 6 ? argv[5] : "";
  if ((argc != 5 && argc != 6) || !absl::SimpleAtoi(argv[3], &seed) ||
      !absl::SimpleAtoi(argv[4], &max_dim) || max_dim < 1 ||
      (argc == 6 && mode != "truncate_ring" && mode != "ring_busy" &&
       mode != "share")) {
    std::cerr << "usage: soak_holder TARGET SHM_PREFIX SEED MAX_DIM "
                 "[truncate_ring|ring_busy|share]\n";
    return 2;
  }
  const bool truncate_ring = mode == "truncate_ring";
  if (truncate_ring) {
    struct sigaction park {};
    park.sa_handler = ParkFaultingThread;
    sigaction(SIGBUS, &park, nullptr);
  }
  const std::string prefix = argv[2];
  std::mt19937_64 rng(seed);
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Create(argv[1], {.wait_for_ready = true});
  if (!client.ok()) return Fail("Client", client.status());
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Open(**client, "soak_holder");
  if (!session.ok()) return Fail("OpenSession", session.status());
  if (mode == "ring_busy") {
    return RingBusy(**client, **session, prefix, rng, max_dim);
  }
  if (mode == "share") {
    return ShareWeight(**client, **session, prefix, seed, max_dim);
  }

  const int64_t segment_bytes =
      int64_t{kInFlight} * 3 * (4 * max_dim * max_dim + 64) + (1 << 16);
  std::vector<std::unique_ptr<SharedMemorySegment>> segments;
  std::vector<std::unique_ptr<RegisteredRegion>> regions;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<SharedMemorySegment>> segment =
        SharedMemorySegment::Create(segment_bytes, prefix);
    if (!segment.ok()) return Fail("creating a segment", segment.status());
    absl::StatusOr<std::unique_ptr<RegisteredRegion>> region =
        RegisteredRegion::RegisterShm(**client, **session, **segment);
    (*segment)->Unlink();
    if (!region.ok()) return Fail("RegisterRegion", region.status());
    segments.push_back(*std::move(segment));
    regions.push_back(*std::move(region));
  }
  // No ring left is an answer the daemon may give; the holder goes on
  // without one.
  RequestRingOptions ring_options;
  ring_options.slots = 8;
  ring_options.shm_prefix = prefix;
  absl::StatusOr<std::unique_ptr<RequestRing>> ring =
      RequestRing::Attach(**client, **session, ring_options);
  if (!ring.ok() && !absl::IsResourceExhausted(ring.status())) {
    return Fail("AttachRing", ring.status());
  }

  // Products in flight on both regions until the kill comes; each uses
  // its own slice of its region, so answers never overlap.
  std::deque<std::future<absl::StatusOr<v1::MatmulResponse>>> unary;
  std::vector<v1::MatmulResponse> ring_answers(kInFlight);
  std::vector<std::atomic<bool>> ring_busy(kInFlight);
  const uint64_t slice = static_cast<uint64_t>(segment_bytes / kInFlight);
  std::uniform_int_distribution<int64_t> dim(1, max_dim);
  for (uint64_t step = 0;; ++step) {
    const int slot = static_cast<int>(step % kInFlight);
    const int which = static_cast<int>(step % 2);
    ProblemSpec spec{.m = dim(rng), .n = dim(rng), .k = dim(rng)};
    const bool through_ring =
        ring.ok() && which == 1 && !ring_busy[slot].load();
    absl::StatusOr<RegionRequest> placed = MakeRandomRegionRequest(
        spec, rng, segments[which]->bytes(), regions[which]->id(),
        (*session)->session_id(), RegionPlacement{},
        slice * static_cast<uint64_t>(slot));
    if (!placed.ok()) return Fail("placing a product", placed.status());
    if (through_ring) {
      ring_busy[slot] = true;
      (*ring)->CallAsync(
          placed->request, &ring_answers[slot], absl::Seconds(60),
          [&ring_busy, slot](absl::Status) { ring_busy[slot] = false; });
    } else {
      unary.push_back(
          (*client)->MatmulFuture(placed->request, absl::Seconds(60)));
      if (unary.size() >= kInFlight) {
        unary.front().wait();
        unary.pop_front();
      }
    }
    if (truncate_ring && step == 2 * kInFlight) {
      if (!ring.ok()) return kNoMapFiles;  // no ring to truncate
      if (!TruncateMapped((*ring)->shm_name())) return kNoMapFiles;
    }
    if (step % 64 == 63) absl::SleepFor(absl::Milliseconds(1));
  }
}

}  // namespace
}  // namespace matmul::soak

int main(int argc, char** argv) { return matmul::soak::Main(argc, argv); }
