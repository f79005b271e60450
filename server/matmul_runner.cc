#include "server/matmul_runner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace matmul {

void MatmulRunner::RunBatch(
    std::vector<std::unique_ptr<PendingProduct>> batch) {
  const absl::Time started = absl::Now();
  std::vector<std::unique_ptr<PendingProduct>> live;
  live.reserve(batch.size());
  for (std::unique_ptr<PendingProduct>& product : batch) {
    // A call past its deadline is also cancelled by gRPC: test the deadline
    // first so the status says why.
    if (absl::FromChrono(product->context->deadline()) < started) {
      std::move(product->finish)(absl::DeadlineExceededError(
          "the request's deadline passed while it waited in the queue"));
    } else if (product->context->IsCancelled()) {
      std::move(product->finish)(
          absl::CancelledError("the call was cancelled before it ran"));
    } else {
      live.push_back(std::move(product));
    }
  }
  if (!live.empty()) RunLaunch(std::move(live), started);
}

void MatmulRunner::RunLaunch(std::vector<std::unique_ptr<PendingProduct>> live,
                             absl::Time started) {
  std::vector<const GemmProblem*> problems;
  problems.reserve(live.size());
  for (const std::unique_ptr<PendingProduct>& product : live) {
    problems.push_back(&product->operands->problem());
  }
  // One batch key means one residency: all in place or all staged.
  const bool on_device = live.front()->operands->on_device();
  absl::StatusOr<GemmRunInfo> run = backend_.RunBatch(problems, on_device);
  if (!run.ok() && live.size() > 1) {
    for (std::unique_ptr<PendingProduct>& product : live) {
      std::vector<std::unique_ptr<PendingProduct>> one;
      one.push_back(std::move(product));
      RunLaunch(std::move(one), started);
    }
    return;
  }
  if (!run.ok()) {
    std::move(live.front()->finish)(absl::Status(
        run.status().code(),
        absl::StrCat(backend_.name(), " backend: ", run.status().message())));
    return;
  }
  const int batch_size = static_cast<int>(live.size());
  metrics_.RecordLaunch(ShapeName(live.front()->plan.problem), batch_size,
                        run->kernel_seconds);
  if (batch_size == 1) {  // no hand-off: the fastest answer for a lone call
    Answer(std::move(live), *run, started, batch_size);
    return;
  }
  // Split over the responder's threads, a few products per task.
  const int chunks = std::min(responder_.threads(), (batch_size + 3) / 4);
  const int per_chunk = (batch_size + chunks - 1) / chunks;
  for (int first = 0; first < batch_size; first += per_chunk) {
    std::vector<std::unique_ptr<PendingProduct>> chunk;
    for (int i = first; i < std::min(batch_size, first + per_chunk); ++i) {
      chunk.push_back(std::move(live[i]));
    }
    responder_.Post([this, chunk = std::move(chunk), run = *run, started,
                     batch_size]() mutable {
      Answer(std::move(chunk), run, started, batch_size);
    });
  }
}

void MatmulRunner::Answer(std::vector<std::unique_ptr<PendingProduct>> products,
                          const GemmRunInfo& run, absl::Time started,
                          int batch_size) {
  for (const std::unique_ptr<PendingProduct>& product : products) {
    const GemmProblem& p = product->plan.problem;
    v1::MatmulResponse* response = product->response;
    response->set_request_id(product->request->request_id());
    if (!product->plan.output_in_region) {
      v1::Tensor* c = response->mutable_c();
      c->set_dtype(p.c_dtype == DType::kBF16 ? v1::DTYPE_BF16 : v1::DTYPE_FP32);
      if (p.batch > 1) c->add_shape(p.batch);
      c->add_shape(p.m);
      c->add_shape(p.n);
      c->set_inline_data(product->operands->TakeOutput());
    }
    response->set_backend(backend_.name());
    response->set_kernel(run.kernel);
    response->set_batch_size(static_cast<uint32_t>(batch_size));

    RequestRecord record;
    record.shape = ShapeName(p);
    record.kernel = run.kernel;
    record.flops = p.flops();
    record.queue_seconds = absl::ToDoubleSeconds(started - product->accepted);
    record.total_seconds =
        absl::ToDoubleSeconds(absl::Now() - product->accepted);
    v1::Timing* timing = response->mutable_timing();
    timing->set_queue_seconds(record.queue_seconds);
    timing->set_kernel_seconds(run.kernel_seconds);
    timing->set_total_seconds(record.total_seconds);
    metrics_.RecordRequest(record);
    std::move(product->finish)(absl::OkStatus());
  }
}

}  // namespace matmul
