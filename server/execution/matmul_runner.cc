#include "server/execution/matmul_runner.h"

#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/gemm/shape_name.h"
#include "common/gemm/stream_order.h"
#include "kernels/device_lost.h"

namespace matmul {
namespace {

// Answers `product` if it must not run any more (its deadline passed or
// its call was cancelled); true if it did.
bool AnswerIfStale(PendingProduct& product, absl::Time now) {
  // A call past its deadline is also cancelled by gRPC: test the deadline
  // first so the status says why.
  if (product.control.deadline <= now) {
    std::move(product.finish)(absl::DeadlineExceededError(
        "the request's deadline passed while it waited in the queue"));
    return true;
  }
  if (product.control.cancelled && product.control.cancelled()) {
    std::move(product.finish)(
        absl::CancelledError("the call was cancelled before it ran"));
    return true;
  }
  return false;
}

// False for a stream-ordered product whose client's stream has not reached
// its wait word yet.
bool StreamReached(const PendingProduct& product) {
  const StreamOrder* order = product.operands->problem().stream_order;
  return order == nullptr ||
         WordReached(order->wait_host->load(std::memory_order_acquire),
                     order->wait_value);
}

absl::Status DeviceLostAnswer() {
  return absl::UnavailableError(
      "the GPU was lost (its CUDA context failed); the daemon is stopping "
      "so that its supervisor restarts it: retry then");
}

}  // namespace

MatmulRunner::~MatmulRunner() {
  // Launches the backend completes on a thread of its own answer through
  // this runner.
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* outstanding) { return *outstanding == 0; }, &outstanding_));
}

void MatmulRunner::RunBatch(std::vector<std::unique_ptr<PendingProduct>> batch,
                            LaunchHold hold) {
  const absl::Time started = absl::Now();
  std::vector<std::unique_ptr<PendingProduct>> live;
  live.reserve(batch.size());
  for (std::unique_ptr<PendingProduct>& product : batch) {
    // Answered already by a drain past its grace: nothing to run.
    if (product->in_flight != nullptr && product->in_flight->claimed()) {
      continue;
    }
    if (device_lost_.load(std::memory_order_acquire)) {
      std::move(product->finish)(DeviceLostAnswer());
    } else if (!AnswerIfStale(*product, started)) {
      if (product->in_flight != nullptr) {
        product->in_flight->SetStage(InFlightRequest::Stage::kRunning);
      }
      live.push_back(std::move(product));
    }
  }
  if (live.empty()) return;
  // A list is a launch of its own (PlaceInBatches).
  if (live.front()->list != nullptr) {
    RunList(*live.front(), started);
    return;
  }
  std::vector<std::unique_ptr<PendingProduct>> waiting;
  for (auto it = live.begin(); it != live.end();) {
    if (StreamReached(**it)) {
      ++it;
    } else {
      waiting.push_back(std::move(*it));
      it = live.erase(it);
    }
  }
  if (!live.empty()) StartLaunch(std::move(live), started, std::move(hold));
  hold.Release();  // none of these may take it: they may wait long
  for (std::unique_ptr<PendingProduct>& product : waiting) {
    std::vector<std::unique_ptr<PendingProduct>> one;
    one.push_back(std::move(product));
    StartLaunch(std::move(one), started, LaunchHold());
  }
}

absl::Status MatmulRunner::BackendFailure(const absl::Status& status) const {
  return absl::Status(
      status.code(),
      absl::StrCat(backend_.name(), " backend: ", status.message()));
}

void MatmulRunner::FillAnswer(PendingProduct& product,
                              const std::string& kernel, int batch_size,
                              double queue_seconds, double kernel_seconds,
                              double total_seconds) const {
  v1::MatmulResponse* response = product.response;
  response->set_request_id(product.request->request_id());
  response->set_backend(backend_.name());
  response->set_device_index(device_index_);
  response->set_kernel(kernel);
  response->set_batch_size(static_cast<uint32_t>(batch_size));
  v1::Timing* timing = response->mutable_timing();
  timing->set_queue_seconds(queue_seconds);
  timing->set_kernel_seconds(kernel_seconds);
  timing->set_total_seconds(total_seconds);
}

void MatmulRunner::DeviceLost(const std::vector<PendingProduct*>& products,
                              const absl::Status& status) {
  for (PendingProduct* product : products) {
    std::move(product->finish)(DeviceLostAnswer());
  }
  if (!device_lost_.exchange(true) && on_device_lost_) {
    on_device_lost_(status);
  }
}

void MatmulRunner::RunList(PendingProduct& product, absl::Time started) {
  const BoundList& list = *product.list;
  const absl::Time launched = absl::Now();
  absl::StatusOr<std::vector<GemmRunInfo>> runs =
      backend_.RunList(list.gemm_list(), list.on_device());
  const absl::Time ran = absl::Now();
  if (!runs.ok() && IsDeviceLost(runs.status())) {
    DeviceLost({&product}, runs.status());
    return;
  }
  if (!runs.ok()) {
    std::move(product.finish)(BackendFailure(runs.status()));
    return;
  }
  if (absl::Status intact = list.CheckRegionsIntact(); !intact.ok()) {
    std::move(product.finish)(std::move(intact));
    return;
  }
  if (product.in_flight != nullptr && !product.in_flight->ClaimForWriting()) {
    return;
  }
  // Each product's FLOPs and kernel time count under its own shape and
  // kernel; the request's latency under the list's (kListShape).
  const std::vector<GemmProblem>& problems = list.gemm_list().products;
  std::vector<RequestRecord> records;
  records.reserve(problems.size() + 1);  // and the list's own
  double kernel_seconds = 0.0;
  for (size_t i = 0; i < problems.size(); ++i) {
    RequestRecord& record = records.emplace_back();
    record.shape = ShapeName(problems[i]);
    record.kernel = (*runs)[i].kernel;
    record.flops = problems[i].flops();
    record.kernel_seconds = (*runs)[i].kernel_seconds;
    record.observe_latency = false;
    kernel_seconds += record.kernel_seconds;
  }
  const std::string kernels = absl::StrJoin(
      records, " + ",
      [](std::string* out, const RequestRecord& r) { out->append(r.kernel); });
  RequestRecord& whole = records.emplace_back();
  whole.shape = std::string(kListShape);
  whole.queue_seconds = absl::ToDoubleSeconds(started - product.accepted);
  whole.total_seconds = absl::ToDoubleSeconds(absl::Now() - product.accepted);
  whole.observe_kernel = false;
  FillAnswer(product, kernels, /*batch_size=*/1, whole.queue_seconds,
             kernel_seconds, whole.total_seconds);
  std::move(product.finish)(absl::OkStatus());
  const absl::Time answered = absl::Now();
  metrics_.RecordRequests(device_label_, records);
  metrics_.RecordLaunch(
      device_label_, whole.shape,
      {.batch_size = 1,
       .kernel_seconds = kernel_seconds,
       .launch_seconds = absl::ToDoubleSeconds(ran - launched),
       .answer_seconds = absl::ToDoubleSeconds(answered - ran)});
}

void MatmulRunner::StartLaunch(
    std::vector<std::unique_ptr<PendingProduct>> live, absl::Time started,
    LaunchHold hold) {
  std::vector<const GemmProblem*> problems;
  problems.reserve(live.size());
  for (const std::unique_ptr<PendingProduct>& product : live) {
    problems.push_back(&product->operands->problem());
  }
  // One batch key means one residency: all in place or all staged.
  const bool on_device = live.front()->operands->on_device();
  // Held by the completion, and by this call until its last use of the
  // runner.
  {
    absl::MutexLock lock(&mu_);
    outstanding_ += 2;
  }
  const absl::Time launched = absl::Now();
  const std::thread::id launcher = std::this_thread::get_id();
  // The products move into the completion, which may run on a thread of
  // the backend's once the launch is complete.
  backend_.StartBatch(
      problems, on_device,
      [this, live = std::move(live), started, launched, launcher,
       hold = std::move(hold)](absl::StatusOr<GemmRunInfo> run) mutable {
        // The key's next batch may launch while this one's
        // answers go out.
        hold.Release();
        FinishLaunch(live, started, launched, launcher, std::move(run));
        absl::MutexLock lock(&mu_);
        --outstanding_;
      });
  metrics_.RecordWorkerSeconds(device_label_,
                               absl::ToDoubleSeconds(absl::Now() - launched));
  absl::MutexLock lock(&mu_);
  --outstanding_;
}

void MatmulRunner::FinishLaunch(
    std::vector<std::unique_ptr<PendingProduct>>& live, absl::Time started,
    absl::Time launched, std::thread::id launcher,
    absl::StatusOr<GemmRunInfo> run) {
  const absl::Time ran = absl::Now();
  if (!run.ok() && IsDeviceLost(run.status())) {
    std::vector<PendingProduct*> products;
    for (const std::unique_ptr<PendingProduct>& product : live) {
      products.push_back(product.get());
    }
    DeviceLost(products, run.status());
    return;
  }
  // A launch of several that failed as it started fails on the thread that
  // started it (GemmBackend::StartBatch), so these retries start from a
  // worker; one that failed later, on the backend's thread, failed as the
  // device does, and each product is answered so.
  if (!run.ok() && live.size() > 1 && std::this_thread::get_id() == launcher) {
    for (std::unique_ptr<PendingProduct>& product : live) {
      if (AnswerIfStale(*product, absl::Now())) continue;
      std::vector<std::unique_ptr<PendingProduct>> one;
      one.push_back(std::move(product));
      StartLaunch(std::move(one), started, LaunchHold());
    }
    return;
  }
  if (!run.ok()) {
    for (std::unique_ptr<PendingProduct>& product : live) {
      std::move(product->finish)(BackendFailure(run.status()));
    }
    return;
  }
  const GemmProblem& shape = live.front()->plan.problem;
  const int batch_size = static_cast<int>(live.size());
  const std::string shape_name = ShapeName(shape);
  // Metrics are recorded after the last answer: a batch's clients send
  // their next requests sooner, and one lock covers the whole batch.
  std::vector<RequestRecord> records;
  records.reserve(live.size());
  double launch_flops = 0.0;
  for (const std::unique_ptr<PendingProduct>& product : live) {
    launch_flops += product->plan.problem.flops();
  }
  for (std::unique_ptr<PendingProduct>& product : live) {
    // A region whose segment shrank while the product ran may have fed it
    // zeros, or swallowed its result.
    if (absl::Status intact = product->operands->CheckRegionsIntact();
        !intact.ok()) {
      std::move(product->finish)(std::move(intact));
      continue;
    }
    // A drain past its grace may have answered the call already; then its
    // response is gone.
    if (product->in_flight != nullptr &&
        !product->in_flight->ClaimForWriting()) {
      continue;
    }
    const GemmProblem& p = product->plan.problem;
    if (!product->plan.output_in_region) {
      v1::Tensor* c = product->response->mutable_c();
      c->set_dtype(p.c_dtype == DType::kBF16 ? v1::DTYPE_BF16 : v1::DTYPE_FP32);
      if (p.batch > 1) c->add_shape(p.batch);
      c->add_shape(p.m);
      c->add_shape(p.n);
      c->set_inline_data(product->operands->TakeOutput());
    }

    RequestRecord& record = records.emplace_back();
    // Products of a launch differ at most in their batch count.
    record.shape = p.batch == shape.batch ? shape_name : ShapeName(p);
    record.kernel = run->kernel;
    record.flops = p.flops();
    record.kernel_seconds =
        launch_flops > 0 ? run->kernel_seconds * record.flops / launch_flops
                         : 0.0;
    record.queue_seconds = absl::ToDoubleSeconds(started - product->accepted);
    record.total_seconds =
        absl::ToDoubleSeconds(absl::Now() - product->accepted);
    FillAnswer(*product, run->kernel, batch_size, record.queue_seconds,
               run->kernel_seconds, record.total_seconds);
    std::move(product->finish)(absl::OkStatus());
  }
  const absl::Time answered = absl::Now();
  metrics_.RecordRequests(device_label_, records);
  metrics_.RecordLaunch(
      device_label_, shape_name,
      {.batch_size = batch_size,
       .kernel_seconds = run->kernel_seconds,
       .launch_seconds = absl::ToDoubleSeconds(ran - launched),
       .answer_seconds = absl::ToDoubleSeconds(answered - ran),
       .stages = run->launch_stages});
}

}  // namespace matmul
