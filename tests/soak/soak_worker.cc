#include "tests/soak/soak_worker.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <future>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"
#include "grpcpp/client_context.h"

namespace matmul::soak {
namespace {

using absl::StatusCode;

double ToleranceOf(const v1::MatmulRequest& request) {
  absl::StatusOr<DType> dtype = ResolvedOutDType(request);
  return DefaultTolerance(dtype.ok() ? *dtype : DType::kBF16);
}

}  // namespace

bool SoakShared::TryStartHolder(int max) {
  absl::MutexLock lock(&mu_);
  if (running_ >= max) return false;
  ++running_;
  return true;
}

void SoakShared::HolderDone(int pid) {
  absl::MutexLock lock(&mu_);
  --running_;
  if (pid > 0) pids_.push_back(pid);
}

std::vector<int> SoakShared::holder_pids() const {
  absl::MutexLock lock(&mu_);
  return pids_;
}

absl::StatusOr<std::unique_ptr<SoakWorker>> SoakWorker::Create(
    const WorkerOptions& options, std::vector<Scenario> scenarios,
    SoakShared& shared, int index, uint64_t seed) {
  if (options.max_dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_dim is ", options.max_dim, "; expected >= 1"));
  }
  ClientOptions client_options;
  client_options.default_timeout = options.call_timeout;
  // Large enough to send what the daemon must refuse. gRPC shares one
  // connection among channels whose arguments agree; a limit that differs
  // by the worker's index gives each worker a connection of its own, as
  // separate client processes would have.
  client_options.max_message_bytes =
      std::max<int64_t>(client_options.max_message_bytes,
                        2 * options.server_max_message_bytes + (1 << 20)) +
      index;
  ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                   Client::Create(options.target, client_options));
  return std::unique_ptr<SoakWorker>(new SoakWorker(
      options, std::move(scenarios), shared, seed, std::move(client)));
}

SoakWorker::SoakWorker(const WorkerOptions& options,
                       std::vector<Scenario> scenarios, SoakShared& shared,
                       uint64_t seed, std::unique_ptr<Client> client)
    : options_(options),
      scenarios_(std::move(scenarios)),
      shared_(shared),
      rng_(seed),
      client_(std::move(client)) {
  for (Scenario scenario : scenarios_) total_weight_ += InfoOf(scenario).weight;
}

void SoakWorker::Run(const std::atomic<bool>& stop) {
  while (!stop.load(std::memory_order_relaxed)) {
    Step(Draw());
    if (++steps_in_session_ >= options_.steps_per_session) DropSession();
  }
  DropSession();
}

Scenario SoakWorker::Draw() {
  int pick = static_cast<int>(rng_() % static_cast<uint64_t>(total_weight_));
  for (Scenario scenario : scenarios_) {
    pick -= InfoOf(scenario).weight;
    if (pick < 0) return scenario;
  }
  return scenarios_.back();
}

void SoakWorker::Step(Scenario scenario) {
  switch (scenario) {
    case Scenario::kProductInline:
      return ProductInline();
    case Scenario::kProductShm:
      return ProductShm(/*ring=*/false);
    case Scenario::kProductRing:
      return ProductShm(/*ring=*/true);
    case Scenario::kProductStream:
      return ProductStream();
    case Scenario::kMalformed:
      return Malformed();
    case Scenario::kUnparseable:
      return Unparseable();
    case Scenario::kOversized:
      return Oversized();
    case Scenario::kCancel:
      return Cancel();
    case Scenario::kDeadline:
      return Deadline();
    case Scenario::kUnregister:
      return Unregister();
    case Scenario::kTruncate:
      return Truncate();
    case Scenario::kStreamDrop:
      return StreamDrop();
    case Scenario::kRingDrop:
      return RingDrop();
    case Scenario::kKill:
      return Kill("kill");
    case Scenario::kRingChaos:
      return RingChaos();
    case Scenario::kRingKill:
      return Kill("ring_kill");
    case Scenario::kSharedWeight:
      return SharedWeight();
    case Scenario::kSharedKill:
      return SharedKill();
    case Scenario::kProductIpc:
      return ProductGpu(CudaMemory::Kind::kIpc);
    case Scenario::kProductVmm:
      return ProductGpu(CudaMemory::Kind::kVmm);
    case Scenario::kStreamBatch:
      return StreamBatch();
  }
}

// --- the worker's own session, region and ring ------------------------------

bool SoakWorker::EnsureSession() {
  if (session_ != nullptr && session_->alive()) return true;
  DropSession();
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Open(*client_, "matmul-soak", options_.call_timeout);
  if (!tally().Record("setup", "OpenSession", session.status(),
                      {StatusCode::kOk})) {
    // Failed already: no need to fail again thousands of times a second
    // (a daemon that died fails every call at once).
    absl::SleepFor(absl::Milliseconds(50));
    return false;
  }
  session_ = *std::move(session);
  absl::StatusOr<std::unique_ptr<SharedMemorySegment>> segment =
      SharedMemorySegment::Create(static_cast<int64_t>(ProductBytes()),
                                  options_.shm_prefix);
  if (!segment.ok()) {
    tally().Fail("setup", absl::StrCat("creating a segment: ",
                                       segment.status().ToString()));
    return false;
  }
  segment_ = *std::move(segment);
  absl::StatusOr<std::unique_ptr<RegisteredRegion>> region =
      RegisteredRegion::RegisterShm(*client_, *session_, *segment_, 0, 0,
                                    options_.call_timeout);
  // Registered or not, the name has done its job: nothing is left in
  // /dev/shm if this process dies.
  segment_->Unlink();
  if (!tally().Record("setup", "RegisterRegion(shm)", region.status(),
                      {StatusCode::kOk})) {
    return false;
  }
  region_ = *std::move(region);
  steps_in_session_ = 0;
  return true;
}

RequestRing* SoakWorker::EnsureRing() {
  if (ring_ != nullptr && ring_->attached()) return ring_.get();
  ring_.reset();
  if (!EnsureSession()) return nullptr;
  ring_ = AttachNewRing();
  return ring_.get();
}

std::unique_ptr<RequestRing> SoakWorker::AttachNewRing() {
  RequestRingOptions ring_options;
  ring_options.slots = 8;
  ring_options.shm_prefix = options_.shm_prefix;
  absl::StatusOr<std::unique_ptr<RequestRing>> ring = RequestRing::Attach(
      *client_, *session_, ring_options, options_.call_timeout);
  // --max_rings is shared by every client: running out is an answer.
  tally().Record("setup", "AttachRing", ring.status(),
                 {StatusCode::kOk, StatusCode::kResourceExhausted});
  if (!ring.ok()) return nullptr;
  return *std::move(ring);
}

SoakWorker::GpuRegion* SoakWorker::EnsureGpuRegion(CudaMemory::Kind kind) {
  std::unique_ptr<GpuRegion>& slot = gpu_[static_cast<int>(kind)];
  if (slot != nullptr && session_ != nullptr && session_->alive()) {
    return slot.get();
  }
  if (!EnsureSession()) return nullptr;
  const char* what = kind == CudaMemory::Kind::kIpc ? "cuda_ipc" : "cuda_vmm";
  absl::StatusOr<std::unique_ptr<CudaMemory>> memory =
      CudaMemory::Create(kind, static_cast<int64_t>(ProductBytes()));
  if (!memory.ok()) {
    tally().Fail("setup", absl::StrCat("allocating ", what, " memory: ",
                                       memory.status().ToString()));
    return nullptr;
  }
  auto gpu = std::make_unique<GpuRegion>();
  gpu->memory = *std::move(memory);
  gpu->staging.resize(static_cast<size_t>(gpu->memory->size_bytes()));
  absl::StatusOr<std::unique_ptr<RegisteredRegion>> region =
      RegisteredRegion::Register(*client_, *session_,
                                 gpu->memory->RegisterRequest(),
                                 options_.call_timeout);
  if (!tally().Record("setup", absl::StrCat("RegisterRegion(", what, ")"),
                      region.status(), {StatusCode::kOk})) {
    return nullptr;
  }
  gpu->region = *std::move(region);
  slot = std::move(gpu);
  return slot.get();
}

void SoakWorker::DropSession() {
  DropStreamBatch();
  ring_.reset();
  for (std::unique_ptr<GpuRegion>& gpu : gpu_) gpu.reset();
  region_.reset();
  segment_.reset();
  session_.reset();
  steps_in_session_ = 0;
}

// --- random problems ---------------------------------------------------------

ProblemSpec SoakWorker::RandomSpec(int64_t low, int64_t high) {
  std::uniform_int_distribution<int64_t> dim(low, high);
  ProblemSpec spec;
  spec.m = dim(rng_);
  spec.n = dim(rng_);
  spec.k = dim(rng_);
  const uint64_t bits = rng_();
  if ((bits & 7) == 0) spec.batch = 1 + static_cast<int64_t>((bits >> 3) % 4);
  spec.transpose_a = (bits >> 5) & 1;
  spec.transpose_b = (bits >> 6) & 1;
  if (((bits >> 7) & 3) == 0) spec.alpha = 0.5f + (bits >> 20) % 4 * 0.25f;
  if (((bits >> 9) & 3) == 0) spec.beta = -0.5f;
  if (((bits >> 11) & 3) == 0) spec.out_dtype = DType::kFP32;
  if (spec.batch > 1 && ((bits >> 13) & 3) == 0) spec.broadcast_b = true;
  if (((bits >> 15) & 7) == 0) spec.row_padding = 1 + (bits >> 24) % 8;
  return spec;
}

RegionPlacement SoakWorker::RandomPlacement() {
  const uint64_t bits = rng_();
  // A and B mostly in the region; C in it half the time.
  return RegionPlacement{.a = (bits & 3) != 0,
                         .b = ((bits >> 2) & 3) != 0,
                         .c = ((bits >> 4) & 1) != 0};
}

uint64_t SoakWorker::ProductBytes() const {
  // Three operands of up to 4 x (3 max_dim) x (3 max_dim + 8) FP32
  // elements, each 64-byte aligned.
  const uint64_t dim = static_cast<uint64_t>(3 * options_.max_dim);
  return 3 * (4 * 4 * dim * (dim + 8) + 64);
}

absl::Duration SoakWorker::RandomDelay(absl::Duration max) {
  const int64_t us = absl::ToInt64Microseconds(max);
  return absl::Microseconds(us > 0 ? static_cast<int64_t>(rng_() % (us + 1))
                                   : 0);
}

void SoakWorker::CheckInline(const char* scenario,
                             const v1::MatmulRequest& request,
                             const v1::MatmulResponse& response) {
  absl::StatusOr<double> error = CheckResponse(request, response);
  tally().RecordCheck(scenario, "product", error.status(),
                      error.ok() ? *error : 0.0, ToleranceOf(request));
}

void SoakWorker::CheckRegion(const char* scenario, const RegionRequest& placed,
                             const v1::MatmulResponse& response,
                             absl::Span<const char> memory) {
  absl::StatusOr<double> error = CheckRegionResponse(placed, response, memory);
  tally().RecordCheck(scenario, "region product", error.status(),
                      error.ok() ? *error : 0.0, ToleranceOf(placed.reference));
}

void SoakWorker::CheckStreamAnswer(
    const char* scenario, const std::vector<v1::MatmulRequest>& requests,
    const v1::MatmulResponse& response) {
  const uint64_t id = response.request_id();
  if (id < 1 || id > requests.size()) {
    tally().Fail(scenario, absl::StrCat("answer for request_id ", id,
                                        ", which was never sent"));
    return;
  }
  if (tally().Record(scenario, "stream message", ResponseStatus(response),
                     {StatusCode::kOk})) {
    CheckInline(scenario, requests[id - 1], response);
  }
}

// --- checked products --------------------------------------------------------

void SoakWorker::ProductInline() {
  absl::StatusOr<v1::MatmulRequest> request =
      MakeRandomRequest(RandomSpec(1, options_.max_dim), rng_);
  if (!request.ok()) {
    return tally().Fail("product_inline", request.status().ToString());
  }
  absl::StatusOr<v1::MatmulResponse> response =
      client_->Matmul(*request, options_.call_timeout);
  if (tally().Record("product_inline", "Matmul", response.status(),
                     {StatusCode::kOk}) &&
      response.ok()) {
    CheckInline("product_inline", *request, *response);
  }
}

void SoakWorker::ProductShm(bool ring) {
  const char* scenario = ring ? "product_ring" : "product_shm";
  if (!EnsureSession()) return;
  RequestRing* attached = ring ? EnsureRing() : nullptr;
  if (ring && attached == nullptr) return tally().Count(scenario, "no_ring");
  RegionPlacement placement = RandomPlacement();
  if (ring) placement.c = true;  // an inline answer would go over gRPC
  absl::StatusOr<RegionRequest> placed = MakeRandomRegionRequest(
      RandomSpec(1, options_.max_dim), rng_, segment_->bytes(), region_->id(),
      session_->session_id(), placement);
  if (!placed.ok()) return tally().Fail(scenario, placed.status().ToString());
  absl::StatusOr<v1::MatmulResponse> response =
      ring ? attached->Matmul(placed->request, options_.call_timeout)
           : client_->Matmul(placed->request, options_.call_timeout);
  if (tally().Record(scenario, ring ? "ring Matmul" : "Matmul",
                     response.status(), {StatusCode::kOk}) &&
      response.ok()) {
    CheckRegion(scenario, *placed, *response, segment_->bytes());
  }
}

void SoakWorker::ProductStream() {
  const int count = 1 + static_cast<int>(rng_() % 4);
  std::vector<v1::MatmulRequest> requests;
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<v1::MatmulRequest> request =
        MakeRandomRequest(RandomSpec(1, options_.max_dim), rng_);
    if (!request.ok()) {
      return tally().Fail("product_stream", request.status().ToString());
    }
    request->set_request_id(static_cast<uint64_t>(i + 1));
    requests.push_back(*std::move(request));
  }
  absl::StatusOr<std::vector<v1::MatmulResponse>> responses =
      client_->MatmulStream(requests, options_.call_timeout);
  if (!tally().Record("product_stream", "MatmulStream", responses.status(),
                      {StatusCode::kOk}) ||
      !responses.ok()) {
    return;
  }
  for (const v1::MatmulResponse& response : *responses) {
    CheckStreamAnswer("product_stream", requests, response);
  }
}

void SoakWorker::ProductGpu(CudaMemory::Kind kind) {
  const char* scenario =
      kind == CudaMemory::Kind::kIpc ? "product_ipc" : "product_vmm";
  GpuRegion* gpu = EnsureGpuRegion(kind);
  if (gpu == nullptr) return;
  absl::StatusOr<RegionRequest> placed = MakeRandomRegionRequest(
      RandomSpec(1, options_.max_dim), rng_, absl::MakeSpan(gpu->staging),
      gpu->region->id(), session_->session_id(), RandomPlacement());
  if (!placed.ok()) return tally().Fail(scenario, placed.status().ToString());
  if (absl::Status copied = gpu->memory->CopyFromHost(gpu->staging);
      !copied.ok()) {
    return tally().Fail(scenario, copied.ToString());
  }
  absl::StatusOr<v1::MatmulResponse> response =
      client_->Matmul(placed->request, options_.call_timeout);
  if (!tally().Record(scenario, "Matmul", response.status(),
                      {StatusCode::kOk}) ||
      !response.ok()) {
    return;
  }
  if (absl::Status copied =
          gpu->memory->CopyToHost(absl::MakeSpan(gpu->staging));
      !copied.ok()) {
    return tally().Fail(scenario, copied.ToString());
  }
  CheckRegion(scenario, *placed, *response, gpu->staging);
}

}  // namespace matmul::soak
