// The scenarios that take things away from products in flight: regions
// unregistered or truncated, streams and rings dropped, clients killed.
// The daemon must answer every accepted product (right, or with the code
// that says why not) and keep serving.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/unique_fd.h"
#include "grpcpp/client_context.h"
#include "tests/soak/soak_worker.h"

extern char** environ;

namespace matmul::soak {
namespace {

using absl::StatusCode;

// Products in flight at once in the scenarios that race something against
// them (unregister, truncate, ring drop).
constexpr int kRacedProducts = 4;

}  // namespace

std::string WaitStatusText(int wstatus) {
  return WIFEXITED(wstatus) ? absl::StrCat("exit status ", WEXITSTATUS(wstatus))
                            : absl::StrCat("signal ", WTERMSIG(wstatus));
}

// --- regions and rings taken away while in use ------------------------------

// A fresh shm region of the worker's session with kRacedProducts products
// in flight on it, for the scenarios that take it away from them.
struct SoakWorker::RacedRegion {
  std::unique_ptr<SharedMemorySegment> segment;
  // A second descriptor, opened before the name is unlinked, to truncate
  // the segment through.
  UniqueFd fd;
  std::unique_ptr<RegisteredRegion> region;
  std::vector<RegionRequest> placed;  // placed[0] names the region
  std::vector<std::future<absl::StatusOr<v1::MatmulResponse>>> answers;
};

std::unique_ptr<SoakWorker::RacedRegion> SoakWorker::StartRace(
    const char* scenario) {
  if (!EnsureSession()) return nullptr;
  auto race = std::make_unique<RacedRegion>();
  const uint64_t stride = AlignRegionOffset(ProductBytes());
  absl::StatusOr<std::unique_ptr<SharedMemorySegment>> segment =
      SharedMemorySegment::Create(static_cast<int64_t>(stride * kRacedProducts),
                                  options_.shm_prefix);
  if (!segment.ok()) {
    tally().Fail(scenario, segment.status().ToString());
    return nullptr;
  }
  race->segment = *std::move(segment);
  race->fd = UniqueFd(
      shm_open(("/" + race->segment->name()).c_str(), O_RDWR | O_CLOEXEC, 0));
  if (!race->fd.valid()) {
    tally().Fail(scenario, absl::StrCat("shm_open: ", std::strerror(errno)));
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<RegisteredRegion>> region =
      RegisteredRegion::RegisterShm(*client_, *session_, *race->segment, 0, 0,
                                    options_.call_timeout);
  race->segment->Unlink();
  if (!tally().Record("setup", "RegisterRegion(shm)", region.status(),
                      {StatusCode::kOk})) {
    return nullptr;
  }
  race->region = *std::move(region);
  for (int i = 0; i < kRacedProducts; ++i) {
    // The first one is sent again afterwards, so it must name the region.
    RegionPlacement placement = RandomPlacement();
    if (i == 0) placement.a = true;
    absl::StatusOr<RegionRequest> one = MakeRandomRegionRequest(
        RandomSpec(1, options_.max_dim), rng_, race->segment->bytes(),
        race->region->id(), session_->session_id(), placement,
        stride * static_cast<uint64_t>(i));
    if (!one.ok()) {
      tally().Fail(scenario, one.status().ToString());
      break;  // the ones sent are still answered and counted
    }
    race->answers.push_back(
        client_->MatmulFuture(one->request, options_.call_timeout));
    race->placed.push_back(*std::move(one));
  }
  if (race->placed.empty()) return nullptr;
  absl::SleepFor(RandomDelay(absl::Microseconds(500)));
  return race;
}

void SoakWorker::Unregister() {
  std::unique_ptr<RacedRegion> race = StartRace("unregister");
  if (race == nullptr) return;
  tally().Record("unregister", "UnregisterRegion",
                 race->region->Unregister(options_.call_timeout).status(),
                 {StatusCode::kOk});
  for (size_t i = 0; i < race->answers.size(); ++i) {
    absl::StatusOr<v1::MatmulResponse> response = race->answers[i].get();
    // Accepted before the unregister: it runs on the region (whose release
    // waits for it) and must be right; after: the region is gone.
    if (tally().Record("unregister", "Matmul", response.status(),
                       {StatusCode::kOk, StatusCode::kNotFound}) &&
        response.ok()) {
      CheckRegion("unregister", race->placed[i], *response,
                  race->segment->bytes());
    }
  }
  tally().Record(
      "unregister", "Matmul after UnregisterRegion",
      client_->Matmul(race->placed[0].request, options_.call_timeout).status(),
      {StatusCode::kNotFound});
}

void SoakWorker::Truncate() {
  if (rng_() % 4 == 0) return TruncateRing();
  std::unique_ptr<RacedRegion> race = StartRace("truncate");
  if (race == nullptr) return;
  if (ftruncate(race->fd.get(), 0) != 0) {
    // A sealed segment (F_SEAL_SHRINK) refuses; nothing else should.
    if (errno == EPERM) return tally().Count("truncate", "ftruncate_refused");
    tally().Fail("truncate", absl::StrCat("ftruncate: ", std::strerror(errno)));
  }
  // Our own mapping now faults too: answers are counted, not read.
  for (auto& answer : race->answers) {
    tally().Record("truncate", "Matmul", answer.get().status(),
                   {StatusCode::kOk, StatusCode::kFailedPrecondition});
  }
  tally().Record(
      "truncate", "Matmul after ftruncate",
      client_->Matmul(race->placed[0].request, options_.call_timeout).status(),
      {StatusCode::kFailedPrecondition});
  tally().Record("truncate", "UnregisterRegion",
                 race->region->Unregister(options_.call_timeout).status(),
                 {StatusCode::kOk});
}

void SoakWorker::StreamDrop() {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::MatmulRequest, v1::MatmulResponse>>
      stream = client_->stub().MatmulStream(&context);
  const int count = 2 + static_cast<int>(rng_() % 5);
  std::vector<v1::MatmulRequest> requests;
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<v1::MatmulRequest> request =
        MakeRandomRequest(RandomSpec(1, 2 * options_.max_dim), rng_);
    if (!request.ok()) {
      return tally().Fail("stream_drop", request.status().ToString());
    }
    request->set_request_id(static_cast<uint64_t>(i + 1));
    if (!stream->Write(*request)) break;  // the stream ended already
    requests.push_back(*std::move(request));
  }
  // Read some answers, then walk away from the rest.
  const int reads = static_cast<int>(rng_() % (requests.size() + 1));
  v1::MatmulResponse response;
  for (int i = 0; i < reads && stream->Read(&response); ++i) {
    CheckStreamAnswer("stream_drop", requests, response);
  }
  context.TryCancel();
  tally().Record("stream_drop", "MatmulStream after TryCancel",
                 FromGrpcStatus(stream->Finish()),
                 {StatusCode::kCancelled, StatusCode::kOk});
}

void SoakWorker::RingDrop() {
  if (!EnsureSession()) return;
  const uint64_t stride = AlignRegionOffset(ProductBytes());
  absl::StatusOr<std::unique_ptr<SharedMemorySegment>> segment =
      SharedMemorySegment::Create(static_cast<int64_t>(stride * kRacedProducts),
                                  options_.shm_prefix);
  if (!segment.ok()) {
    return tally().Fail("ring_drop", segment.status().ToString());
  }
  absl::StatusOr<std::unique_ptr<RegisteredRegion>> region =
      RegisteredRegion::RegisterShm(*client_, *session_, **segment, 0, 0,
                                    options_.call_timeout);
  (*segment)->Unlink();
  if (!tally().Record("setup", "RegisterRegion(shm)", region.status(),
                      {StatusCode::kOk})) {
    return;
  }
  // Before the ring: its destructor answers the calls still in flight,
  // whose callbacks write here.
  std::vector<RegionRequest> placed(kRacedProducts);
  std::vector<v1::MatmulResponse> responses(kRacedProducts);
  std::vector<absl::Status> statuses(kRacedProducts);
  std::vector<bool> answered(kRacedProducts, false);
  absl::Mutex mu;
  std::unique_ptr<RequestRing> ring = AttachNewRing();
  if (ring == nullptr) return;
  for (int i = 0; i < kRacedProducts; ++i) {
    absl::StatusOr<RegionRequest> one = MakeRandomRegionRequest(
        RandomSpec(1, 2 * options_.max_dim), rng_, (*segment)->bytes(),
        (*region)->id(), session_->session_id(),
        RegionPlacement{.a = true, .b = true, .c = true},
        stride * static_cast<uint64_t>(i));
    if (!one.ok()) return tally().Fail("ring_drop", one.status().ToString());
    placed[i] = *std::move(one);
    ring->CallAsync(placed[i].request, &responses[i], options_.call_timeout,
                    [&, i](absl::Status status) {
                      absl::MutexLock lock(&mu);
                      statuses[i] = std::move(status);
                      answered[i] = true;
                    });
  }
  absl::SleepFor(RandomDelay(absl::Microseconds(1500)));
  ring.reset();  // detaches; calls still in flight are answered CANCELLED
  absl::MutexLock lock(&mu);
  for (int i = 0; i < kRacedProducts; ++i) {
    if (!answered[i]) {
      tally().Fail("ring_drop", "a ring call was never answered");
      continue;
    }
    if (tally().Record("ring_drop", "ring call", statuses[i],
                       {StatusCode::kOk, StatusCode::kCancelled})) {
      if (statuses[i].ok()) {
        CheckRegion("ring_drop", placed[i], responses[i], (*segment)->bytes());
      }
    }
  }
}

// --- clients killed while they hold things
// ------------------------------------

void SoakWorker::Kill(const char* scenario) {
  if (options_.holder_path.empty() ||
      !shared_.TryStartHolder(options_.max_holders)) {
    return tally().Count(scenario, "skipped");
  }
  const bool ring_kill = std::string_view(scenario) == "ring_kill";
  const pid_t pid =
      SpawnHolder(ring_kill ? HolderMode::kRingBusy : HolderMode::kProducts,
                  scenario, rng_());
  if (pid <= 0) {
    shared_.HolderDone(0);
    return;
  }
  // Anywhere from before its session opens to well into its requests.
  absl::SleepFor(RandomDelay(absl::Milliseconds(800)));
  int wstatus = 0;
  if (waitpid(pid, &wstatus, WNOHANG) == pid) {
    tally().Fail(scenario, absl::StrCat("holder ", pid, " ended by itself (",
                                        WaitStatusText(wstatus),
                                        ") before it was killed"));
  } else {
    kill(pid, SIGKILL);
    waitpid(pid, &wstatus, 0);
    tally().Count(scenario, "killed");
  }
  shared_.HolderDone(pid);
}

void SoakWorker::TruncateRing() {
  if (options_.holder_path.empty() ||
      !shared_.TryStartHolder(options_.max_holders)) {
    return tally().Count("truncate", "ring_skipped");
  }
  const pid_t pid = SpawnHolder(HolderMode::kTruncateRing, "truncate", rng_());
  if (pid <= 0) {
    shared_.HolderDone(0);
    return;
  }
  // It truncates its ring a few requests in, then usually faults on it.
  int wstatus = 0;
  const absl::Time deadline = absl::Now() + absl::Milliseconds(1500);
  while (waitpid(pid, &wstatus, WNOHANG) != pid) {
    if (absl::Now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 3) {
    tally().Count("truncate", "ring_unreachable");  // no CAP_SYS_ADMIN
  } else if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) != 0) {
    tally().Fail("truncate",
                 absl::StrCat("ring-truncating holder ", pid, " failed (",
                              WaitStatusText(wstatus), ")"));
  } else {
    tally().Count("truncate", "ring_truncated");
  }
  shared_.HolderDone(pid);
}

pid_t SoakWorker::SpawnHolder(HolderMode mode, const char* scenario,
                              uint64_t seed_value, int stdout_fd) {
  const std::string seed = absl::StrCat(seed_value);
  const std::string dim = absl::StrCat(options_.max_dim);
  const std::string mode_name = mode == HolderMode::kTruncateRing
                                    ? "truncate_ring"
                                : mode == HolderMode::kRingBusy ? "ring_busy"
                                                                : "share";
  std::vector<char*> argv = {const_cast<char*>(options_.holder_path.c_str()),
                             const_cast<char*>(options_.target.c_str()),
                             const_cast<char*>(options_.shm_prefix.c_str()),
                             const_cast<char*>(seed.c_str()),
                             const_cast<char*>(dim.c_str())};
  if (mode != HolderMode::kProducts) {
    argv.push_back(const_cast<char*>(mode_name.c_str()));
  }
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (stdout_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, stdout_fd, STDOUT_FILENO);
  }
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, options_.holder_path.c_str(), &actions,
                             nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    tally().Fail(scenario, absl::StrCat("spawning ", options_.holder_path, ": ",
                                        std::strerror(rc)));
    return 0;
  }
  return pid;
}

}  // namespace matmul::soak
