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

extern char** environ;

namespace matmul::soak {
namespace {

using absl::StatusCode;

// Products in flight at once in the scenarios that race something against
// them (unregister, truncate, ring drop).
constexpr int kRacedProducts = 4;

std::string WaitStatusText(int wstatus) {
  return WIFEXITED(wstatus) ? absl::StrCat("exit status ", WEXITSTATUS(wstatus))
                            : absl::StrCat("signal ", WTERMSIG(wstatus));
}

absl::Status StatusOf(const grpc::Status& status) {
  return FromGrpcStatus(status);
}

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
      return Kill();
    case Scenario::kProductIpc:
      return ProductGpu(CudaMemory::Kind::kIpc);
    case Scenario::kProductVmm:
      return ProductGpu(CudaMemory::Kind::kVmm);
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
  RequestRingOptions ring_options;
  ring_options.slots = 8;
  ring_options.shm_prefix = options_.shm_prefix;
  absl::StatusOr<std::unique_ptr<RequestRing>> ring = RequestRing::Attach(
      *client_, *session_, ring_options, options_.call_timeout);
  // --max_rings is shared by every client: running out is an answer.
  tally().Record("setup", "AttachRing", ring.status(),
                 {StatusCode::kOk, StatusCode::kResourceExhausted});
  if (!ring.ok()) return nullptr;
  ring_ = *std::move(ring);
  return ring_.get();
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
    const uint64_t id = response.request_id();
    if (id < 1 || id > requests.size()) {
      tally().Fail("product_stream", absl::StrCat("answer for request_id ", id,
                                                  ", which was never sent"));
      continue;
    }
    if (tally().Record("product_stream", "stream message",
                       ResponseStatus(response), {StatusCode::kOk})) {
      CheckInline("product_stream", requests[id - 1], response);
    }
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

// --- requests the daemon must refuse ----------------------------------------

void SoakWorker::Malformed() {
  absl::StatusOr<v1::MatmulRequest> valid =
      MakeRandomRequest(RandomSpec(2, 16), rng_);
  if (!valid.ok()) return tally().Fail("malformed", valid.status().ToString());
  v1::MatmulRequest request = *valid;
  StatusCode expected = StatusCode::kInvalidArgument;
  const char* what = "";
  switch (rng_() % 16) {
    case 0:
      what = "dtype unspecified";
      request.mutable_a()->set_dtype(v1::DTYPE_UNSPECIFIED);
      break;
    case 1:
      what = "unknown dtype";
      request.mutable_b()->set_dtype(static_cast<v1::DType>(77));
      break;
    case 2:
      what = "unknown out_dtype";
      request.set_out_dtype(static_cast<v1::DType>(-3));
      break;
    case 3:
      what = "zero dimension";
      request.mutable_a()->set_shape(0, 0);
      break;
    case 4:
      what = "negative dimension";
      request.mutable_b()->set_shape(1, -5);
      break;
    case 5:
      what = "rank 1";
      request.mutable_a()->clear_shape();
      request.mutable_a()->add_shape(4);
      break;
    case 6:
      what = "inner dimensions disagree";
      request.set_transpose_b(!request.transpose_b());
      request.mutable_b()->set_shape(request.b().shape_size() - 1, 1000003);
      break;
    case 7:
      what = "stride count";
      request.mutable_a()->clear_strides();
      request.mutable_a()->add_strides(1);
      break;
    case 8:
      what = "overflowing strides";
      request.mutable_a()->clear_strides();
      for (int i = 0; i < request.a().shape_size(); ++i) {
        request.mutable_a()->add_strides(std::numeric_limits<int64_t>::max() /
                                         2);
      }
      break;
    case 9:
      what = "negative stride";
      request.mutable_b()->clear_strides();
      for (int i = 0; i < request.b().shape_size(); ++i) {
        request.mutable_b()->add_strides(-1);
      }
      break;
    case 10:
      what = "inline data too short";
      request.mutable_a()->mutable_inline_data()->resize(
          request.a().inline_data().size() - 2);
      break;
    case 11:
      what = "beta without C";
      request.clear_c();
      request.set_beta(1.0f);
      break;
    case 12:
      what = "dimension over max_dimension";
      request.mutable_a()->set_shape(request.a().shape_size() - 2,
                                     int64_t{1} << 40);
      break;
    case 13:
      what = "missing A";
      request.clear_a();
      break;
    case 14: {
      what = "unknown region id";
      if (!EnsureSession()) return;
      expected = StatusCode::kNotFound;
      request.set_session_id(session_->session_id());
      request.mutable_a()->mutable_region()->set_region_id(
          absl::StrCat("no-such-region-", rng_()));
      break;
    }
    case 15: {
      what = "reference past the region's end";
      if (!EnsureSession()) return;
      request.set_session_id(session_->session_id());
      request.mutable_b()->mutable_region()->set_region_id(region_->id());
      request.mutable_b()->mutable_region()->set_offset_bytes(
          region_->size_bytes() - 2);
      break;
    }
  }
  // Over gRPC mostly; sometimes as a message of a MatmulStream, where the
  // error comes back in band.
  absl::Status status;
  if (rng_() % 4 == 0) {
    absl::StatusOr<std::vector<v1::MatmulResponse>> responses =
        client_->MatmulStream({request}, options_.call_timeout);
    status = !responses.ok()      ? responses.status()
             : responses->empty() ? absl::InternalError("no answer")
                                  : ResponseStatus(responses->front());
  } else {
    status = client_->Matmul(request, options_.call_timeout).status();
  }
  tally().Record("malformed", what, status, {expected});
}

void SoakWorker::Unparseable() {
  // proto3 strings must be UTF-8: the client sends these bytes, the daemon
  // cannot parse the message.
  v1::MatmulRequest garbage;
  garbage.set_session_id("\xff\xfe not UTF-8");
  garbage.set_request_id(1);
  if (rng_() % 2 == 0) {
    tally().Record("unparseable", "Matmul",
                   client_->Matmul(garbage, options_.call_timeout).status(),
                   {StatusCode::kInvalidArgument});
    return;
  }
  // In a stream, before a good request: the bad message gets an in-band
  // error (or ends the stream with INVALID_ARGUMENT), never a silent end.
  absl::StatusOr<v1::MatmulRequest> good =
      MakeRandomRequest(RandomSpec(1, options_.max_dim), rng_);
  if (!good.ok()) return tally().Fail("unparseable", good.status().ToString());
  good->set_request_id(2);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
  auto stream = client_->stub().MatmulStream(&context);
  stream->Write(garbage);
  stream->Write(*good);
  stream->WritesDone();
  int answers = 0;
  for (v1::MatmulResponse response; stream->Read(&response);) {
    ++answers;
    if (response.request_id() == 2) {
      if (tally().Record("unparseable", "good message after a bad one",
                         ResponseStatus(response), {StatusCode::kOk})) {
        CheckInline("unparseable", *good, response);
      }
    } else {
      tally().Record("unparseable", "bad stream message",
                     ResponseStatus(response), {StatusCode::kInvalidArgument});
    }
  }
  const absl::Status status = StatusOf(stream->Finish());
  if (status.ok() && answers < 2) {
    tally().Fail("unparseable",
                 absl::StrCat("MatmulStream ended OK after ", answers,
                              " answers to 2 messages (one did not parse)"));
    return;
  }
  tally().Record("unparseable", "MatmulStream", status,
                 {StatusCode::kOk, StatusCode::kInvalidArgument});
}

void SoakWorker::Oversized() {
  if (options_.oversized_request != nullptr && rng_() % 2 == 0) {
    // A message over the daemon's limit: refused before it is parsed.
    absl::Status status;
    if (rng_() % 2 == 0) {
      status =
          client_->Matmul(*options_.oversized_request, options_.call_timeout)
              .status();
    } else {
      status = client_
                   ->MatmulStream({*options_.oversized_request},
                                  options_.call_timeout)
                   .status();
    }
    tally().Record("oversized", "request over max_message_bytes", status,
                   {StatusCode::kResourceExhausted});
    return;
  }
  // A small request whose answer would be over the limit: an FP32 C of
  // M x N with K = 1.
  const int64_t side =
      static_cast<int64_t>(std::sqrt(
          static_cast<double>(options_.server_max_message_bytes) / 4.0)) +
      64;
  if (side * side * 4 > (int64_t{1} << 30)) {
    return tally().Count("oversized", "skipped");  // limit too large to try
  }
  ProblemSpec spec;
  spec.m = side;
  spec.n = side;
  spec.k = 1;
  spec.out_dtype = DType::kFP32;
  absl::StatusOr<v1::MatmulRequest> request = MakeRandomRequest(spec, rng_);
  if (!request.ok()) {
    return tally().Fail("oversized", request.status().ToString());
  }
  tally().Record("oversized", "answer over max_message_bytes",
                 client_->Matmul(*request, options_.call_timeout).status(),
                 {StatusCode::kResourceExhausted});
}

// --- calls given up on -------------------------------------------------------

void SoakWorker::Cancel() {
  absl::StatusOr<v1::MatmulRequest> request = MakeRandomRequest(
      RandomSpec(options_.max_dim, 3 * options_.max_dim), rng_);
  if (!request.ok()) return tally().Fail("cancel", request.status().ToString());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
  v1::MatmulResponse response;
  grpc::Status status;
  absl::Notification done;
  client_->stub().async()->Matmul(&context, &*request, &response,
                                  [&](grpc::Status s) {
                                    status = std::move(s);
                                    done.Notify();
                                  });
  absl::SleepFor(RandomDelay(absl::Milliseconds(3)));
  context.TryCancel();
  done.WaitForNotification();
  // Answered before the cancel arrived: then it must be right.
  if (tally().Record("cancel", "Matmul", StatusOf(status),
                     {StatusCode::kCancelled, StatusCode::kOk}) &&
      status.ok()) {
    CheckInline("cancel", *request, response);
  }
}

void SoakWorker::Deadline() {
  absl::StatusOr<v1::MatmulRequest> request = MakeRandomRequest(
      RandomSpec(options_.max_dim, 3 * options_.max_dim), rng_);
  if (!request.ok()) {
    return tally().Fail("deadline", request.status().ToString());
  }
  const absl::Duration kTimeouts[] = {
      absl::Nanoseconds(1), absl::Microseconds(10), absl::Microseconds(200),
      absl::Milliseconds(1), absl::Milliseconds(5)};
  const absl::Duration timeout = kTimeouts[rng_() % std::size(kTimeouts)];
  absl::StatusOr<v1::MatmulResponse> response =
      client_->Matmul(*request, timeout);
  // A product that ran in time is fine, if it is right.
  if (tally().Record(
          "deadline",
          absl::StrCat("Matmul with timeout ", absl::FormatDuration(timeout)),
          response.status(),
          {StatusCode::kDeadlineExceeded, StatusCode::kOk}) &&
      response.ok()) {
    CheckInline("deadline", *request, *response);
  }
}

// --- regions and rings taken away while in use ------------------------------

void SoakWorker::Unregister() {
  if (!EnsureSession()) return;
  const uint64_t stride = AlignRegionOffset(ProductBytes());
  absl::StatusOr<std::unique_ptr<SharedMemorySegment>> segment =
      SharedMemorySegment::Create(static_cast<int64_t>(stride * kRacedProducts),
                                  options_.shm_prefix);
  if (!segment.ok()) {
    return tally().Fail("unregister", segment.status().ToString());
  }
  absl::StatusOr<std::unique_ptr<RegisteredRegion>> region =
      RegisteredRegion::RegisterShm(*client_, *session_, **segment, 0, 0,
                                    options_.call_timeout);
  (*segment)->Unlink();
  if (!tally().Record("setup", "RegisterRegion(shm)", region.status(),
                      {StatusCode::kOk})) {
    return;
  }
  std::vector<RegionRequest> placed;
  std::vector<std::future<absl::StatusOr<v1::MatmulResponse>>> answers;
  for (int i = 0; i < kRacedProducts; ++i) {
    // The first one is sent again afterwards, so it must name the region.
    RegionPlacement placement = RandomPlacement();
    if (i == 0) placement.a = true;
    absl::StatusOr<RegionRequest> one = MakeRandomRegionRequest(
        RandomSpec(1, options_.max_dim), rng_, (*segment)->bytes(),
        (*region)->id(), session_->session_id(), placement,
        stride * static_cast<uint64_t>(i));
    if (!one.ok()) return tally().Fail("unregister", one.status().ToString());
    answers.push_back(
        client_->MatmulFuture(one->request, options_.call_timeout));
    placed.push_back(*std::move(one));
  }
  absl::SleepFor(RandomDelay(absl::Microseconds(500)));
  tally().Record("unregister", "UnregisterRegion",
                 (*region)->Unregister(options_.call_timeout).status(),
                 {StatusCode::kOk});
  for (int i = 0; i < kRacedProducts; ++i) {
    absl::StatusOr<v1::MatmulResponse> response = answers[i].get();
    // Accepted before the unregister: it runs on the region (whose release
    // waits for it) and must be right; after: the region is gone.
    if (tally().Record("unregister", "Matmul", response.status(),
                       {StatusCode::kOk, StatusCode::kNotFound}) &&
        response.ok()) {
      CheckRegion("unregister", placed[i], *response, (*segment)->bytes());
    }
  }
  tally().Record(
      "unregister", "Matmul after UnregisterRegion",
      client_->Matmul(placed[0].request, options_.call_timeout).status(),
      {StatusCode::kNotFound});
}

void SoakWorker::Truncate() {
  if (rng_() % 4 == 0) return TruncateRing();
  if (!EnsureSession()) return;
  const uint64_t stride = AlignRegionOffset(ProductBytes());
  absl::StatusOr<std::unique_ptr<SharedMemorySegment>> segment =
      SharedMemorySegment::Create(static_cast<int64_t>(stride * kRacedProducts),
                                  options_.shm_prefix);
  if (!segment.ok()) {
    return tally().Fail("truncate", segment.status().ToString());
  }
  // A second descriptor to truncate through once the name is gone.
  UniqueFd fd(
      shm_open(("/" + (*segment)->name()).c_str(), O_RDWR | O_CLOEXEC, 0));
  if (!fd.valid()) {
    return tally().Fail("truncate",
                        absl::StrCat("shm_open: ", std::strerror(errno)));
  }
  absl::StatusOr<std::unique_ptr<RegisteredRegion>> region =
      RegisteredRegion::RegisterShm(*client_, *session_, **segment, 0, 0,
                                    options_.call_timeout);
  (*segment)->Unlink();
  if (!tally().Record("setup", "RegisterRegion(shm)", region.status(),
                      {StatusCode::kOk})) {
    return;
  }
  std::vector<RegionRequest> placed;
  std::vector<std::future<absl::StatusOr<v1::MatmulResponse>>> answers;
  for (int i = 0; i < kRacedProducts; ++i) {
    // The first one is sent again afterwards, so it must name the region.
    RegionPlacement placement = RandomPlacement();
    if (i == 0) placement.a = true;
    absl::StatusOr<RegionRequest> one = MakeRandomRegionRequest(
        RandomSpec(1, options_.max_dim), rng_, (*segment)->bytes(),
        (*region)->id(), session_->session_id(), placement,
        stride * static_cast<uint64_t>(i));
    if (!one.ok()) return tally().Fail("truncate", one.status().ToString());
    answers.push_back(
        client_->MatmulFuture(one->request, options_.call_timeout));
    placed.push_back(*std::move(one));
  }
  absl::SleepFor(RandomDelay(absl::Microseconds(500)));
  if (ftruncate(fd.get(), 0) != 0) {
    // A sealed segment (F_SEAL_SHRINK) refuses; nothing else should.
    if (errno == EPERM) return tally().Count("truncate", "ftruncate_refused");
    tally().Fail("truncate", absl::StrCat("ftruncate: ", std::strerror(errno)));
  }
  // Our own mapping now faults too: answers are counted, not read.
  for (int i = 0; i < kRacedProducts; ++i) {
    tally().Record("truncate", "Matmul", answers[i].get().status(),
                   {StatusCode::kOk, StatusCode::kFailedPrecondition});
  }
  tally().Record(
      "truncate", "Matmul after ftruncate",
      client_->Matmul(placed[0].request, options_.call_timeout).status(),
      {StatusCode::kFailedPrecondition});
  tally().Record("truncate", "UnregisterRegion",
                 (*region)->Unregister(options_.call_timeout).status(),
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
    const uint64_t id = response.request_id();
    if (id < 1 || id > requests.size()) {
      tally().Fail("stream_drop", absl::StrCat("answer for request_id ", id,
                                               ", which was never sent"));
      continue;
    }
    if (tally().Record("stream_drop", "stream message",
                       ResponseStatus(response), {StatusCode::kOk})) {
      CheckInline("stream_drop", requests[id - 1], response);
    }
  }
  context.TryCancel();
  tally().Record("stream_drop", "MatmulStream after TryCancel",
                 StatusOf(stream->Finish()),
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
  RequestRingOptions ring_options;
  ring_options.slots = 8;
  ring_options.shm_prefix = options_.shm_prefix;
  absl::StatusOr<std::unique_ptr<RequestRing>> ring = RequestRing::Attach(
      *client_, *session_, ring_options, options_.call_timeout);
  tally().Record("setup", "AttachRing", ring.status(),
                 {StatusCode::kOk, StatusCode::kResourceExhausted});
  if (!ring.ok()) return;
  for (int i = 0; i < kRacedProducts; ++i) {
    absl::StatusOr<RegionRequest> one = MakeRandomRegionRequest(
        RandomSpec(1, 2 * options_.max_dim), rng_, (*segment)->bytes(),
        (*region)->id(), session_->session_id(),
        RegionPlacement{.a = true, .b = true, .c = true},
        stride * static_cast<uint64_t>(i));
    if (!one.ok()) return tally().Fail("ring_drop", one.status().ToString());
    placed[i] = *std::move(one);
    (*ring)->CallAsync(placed[i].request, &responses[i], options_.call_timeout,
                       [&, i](absl::Status status) {
                         absl::MutexLock lock(&mu);
                         statuses[i] = std::move(status);
                         answered[i] = true;
                       });
  }
  absl::SleepFor(RandomDelay(absl::Microseconds(1500)));
  ring->reset();  // detaches; calls still in flight are answered CANCELLED
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

void SoakWorker::Kill() {
  if (options_.holder_path.empty() ||
      !shared_.TryStartHolder(options_.max_holders)) {
    return tally().Count("kill", "skipped");
  }
  const pid_t pid = SpawnHolder(/*truncate_ring=*/false);
  if (pid <= 0) {
    shared_.HolderDone(0);
    return;
  }
  // Anywhere from before its session opens to well into its requests.
  absl::SleepFor(RandomDelay(absl::Milliseconds(800)));
  int wstatus = 0;
  if (waitpid(pid, &wstatus, WNOHANG) == pid) {
    tally().Fail("kill", absl::StrCat("holder ", pid, " ended by itself (",
                                      WaitStatusText(wstatus),
                                      ") before it was killed"));
  } else {
    kill(pid, SIGKILL);
    waitpid(pid, &wstatus, 0);
    tally().Count("kill", "killed");
  }
  shared_.HolderDone(pid);
}

void SoakWorker::TruncateRing() {
  if (options_.holder_path.empty() ||
      !shared_.TryStartHolder(options_.max_holders)) {
    return tally().Count("truncate", "ring_skipped");
  }
  const pid_t pid = SpawnHolder(/*truncate_ring=*/true);
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

pid_t SoakWorker::SpawnHolder(bool truncate_ring) {
  const std::string seed = absl::StrCat(rng_());
  const std::string dim = absl::StrCat(options_.max_dim);
  const std::string mode = "truncate_ring";
  std::vector<char*> argv = {const_cast<char*>(options_.holder_path.c_str()),
                             const_cast<char*>(options_.target.c_str()),
                             const_cast<char*>(options_.shm_prefix.c_str()),
                             const_cast<char*>(seed.c_str()),
                             const_cast<char*>(dim.c_str())};
  if (truncate_ring) argv.push_back(const_cast<char*>(mode.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (int rc = posix_spawn(&pid, options_.holder_path.c_str(), nullptr, nullptr,
                           argv.data(), environ);
      rc != 0) {
    tally().Fail(truncate_ring ? "truncate" : "kill",
                 absl::StrCat("spawning ", options_.holder_path, ": ",
                              std::strerror(rc)));
    return 0;
  }
  return pid;
}

}  // namespace matmul::soak
