#include "tests/stream_order_bench/stream_ordered_products.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/request_ring_layout.h"
#include "common/status_macros.h"

namespace matmul::stream_order_bench {
namespace {

void SetBf16Region(v1::Tensor* tensor, int64_t rows, int64_t cols,
                   const std::string& region_id) {
  tensor->set_dtype(v1::DTYPE_BF16);
  tensor->add_shape(rows);
  tensor->add_shape(cols);
  v1::RegionRef* region = tensor->mutable_region();
  region->set_region_id(region_id);
  region->set_offset_bytes(0);
}

}  // namespace

absl::StatusOr<std::unique_ptr<DaemonConnection>> DaemonConnection::Open(
    const std::string& target, const DaemonConnectionOptions& options) {
  if (options.in_flight < 1 ||
      options.in_flight > static_cast<int>(ring::kMaxSlots)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "in_flight is ", options.in_flight, "; expected 1..", ring::kMaxSlots));
  }
  auto connection =
      std::unique_ptr<DaemonConnection>(new DaemonConnection(options));
  ASSIGN_OR_RETURN(connection->client_, Client::Create(target));
  RETURN_IF_ERROR(connection->client_->WaitForConnected(options.timeout));
  ASSIGN_OR_RETURN(connection->session_,
                   Session::Open(*connection->client_, "stream-order-bench",
                                 options.timeout));
  ASSIGN_OR_RETURN(
      connection->ring_,
      RequestRing::Attach(*connection->client_, *connection->session_,
                          {.slots = options.in_flight,
                           .spin = options.ring_spin,
                           .shm_prefix = options.shm_prefix},
                          options.timeout));
  ASSIGN_OR_RETURN(
      connection->calls_,
      StreamOrderedCalls::Create(*connection->client_, *connection->session_,
                                 *connection->ring_, options.in_flight));
  return connection;
}

absl::StatusOr<std::unique_ptr<StreamOrderedProducts>>
StreamOrderedProducts::Create(DaemonConnection& connection, int64_t m,
                              int64_t n, int64_t k, const CudaMemory& a,
                              const CudaMemory& b, const CudaMemory& c) {
  auto products = std::unique_ptr<StreamOrderedProducts>(
      new StreamOrderedProducts(connection));
  const absl::Duration timeout = connection.options().timeout;
  auto region = [&](const CudaMemory& memory) {
    return RegisteredRegion::Register(connection.client(), connection.session(),
                                      memory.RegisterRequest(), timeout);
  };
  ASSIGN_OR_RETURN(products->a_region_, region(a));
  ASSIGN_OR_RETURN(products->b_region_, region(b));
  ASSIGN_OR_RETURN(products->c_region_, region(c));

  v1::MatmulRequest& request = products->request_;
  request.set_session_id(connection.session().session_id());
  SetBf16Region(request.mutable_a(), m, k, products->a_region_->id());
  SetBf16Region(request.mutable_b(), n, k, products->b_region_->id());
  request.set_transpose_b(true);
  SetBf16Region(request.mutable_c(), m, n, products->c_region_->id());
  request.set_out_dtype(v1::DTYPE_BF16);
  return products;
}

StreamOrderedProducts::~StreamOrderedProducts() {
  // The answers' callbacks use this object: they are all done once the
  // calls count none in flight (they count a call until its callback has
  // returned). Every call is answered within its timeout.
  const absl::Time deadline =
      absl::Now() + connection_.options().timeout + absl::Seconds(5);
  while (connection_.calls().in_flight() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
}

absl::Status StreamOrderedProducts::Queue(cudaStream_t stream) {
  {
    absl::MutexLock lock(&mu_);
    ++unanswered_;
  }
  const absl::Status queued = connection_.calls().Matmul(
      request_, stream, connection_.options().timeout,
      [this](absl::Status status) { Answered(std::move(status)); });
  if (!queued.ok()) {
    // Refused before it was sent: no answer will come.
    absl::MutexLock lock(&mu_);
    --unanswered_;
  }
  return queued;
}

void StreamOrderedProducts::Answered(absl::Status status) {
  absl::MutexLock lock(&mu_);
  --unanswered_;
  if (!status.ok() && first_error_.ok()) first_error_ = std::move(status);
}

absl::Status StreamOrderedProducts::WaitForAnswers(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto all_answered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return unanswered_ == 0;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&all_answered), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat(unanswered_, " stream-ordered products unanswered after ",
                     absl::FormatDuration(timeout)));
  }
  return std::exchange(first_error_, absl::OkStatus());
}

absl::StatusOr<v1::MatmulResponse> StreamOrderedProducts::RunPlain() {
  return connection_.ring().Matmul(request_, connection_.options().timeout);
}

}  // namespace matmul::stream_order_bench
