// A real daemon (CPU backend) on a temporary unix socket and a real client:
// random products checked against FP64, and every kind of bad input.
#include <future>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/request_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_daemon.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

// Sizes at the edges the issue names plus random ones, keeping each case's
// FP64 reference cheap (batch * m * n * k <= 6e7).
ProblemSpec RandomSpec(int index, std::mt19937_64& rng) {
  const int64_t edges[] = {1, 7, 127, 1000};
  std::uniform_int_distribution<int64_t> any(2, 300);
  auto pick = [&] { return rng() % 2 ? edges[rng() % 4] : any(rng); };
  ProblemSpec spec;
  do {
    spec.m = pick();
    spec.n = pick();
    spec.k = pick();
    spec.batch = index % 5 == 0 ? 1 + static_cast<int64_t>(rng() % 4) : 0;
  } while (spec.effective_batch() * spec.m * spec.n * spec.k > 60'000'000);
  spec.transpose_a = index & 1;
  spec.transpose_b = index & 2;
  if (index % 3 == 1) spec.alpha = -1.5f;
  if (index % 4 == 2) spec.beta = 0.75f;
  if (index % 2 == 1)
    spec.out_dtype = index % 4 == 1 ? DType::kFP32 : DType::kBF16;
  if (spec.batch > 1) {
    spec.broadcast_a = index % 10 == 5;
    spec.broadcast_b = index % 10 == 0;
  }
  if (index % 7 == 3) spec.row_padding = 5;
  return spec;
}

TEST(IntegrationTest, SixtyRandomProductsMatchFp64) {
  TestDaemon daemon;
  std::mt19937_64 rng(1129);
  int fp32_cases = 0;
  int batched_cases = 0;
  for (int i = 0; i < 60; ++i) {
    ProblemSpec spec = RandomSpec(i, rng);
    SCOPED_TRACE(ProblemSpecName(spec));
    absl::StatusOr<v1::MatmulRequest> request = MakeRandomRequest(spec, rng);
    ASSERT_TRUE(request.ok()) << request.status();
    request->set_request_id(i);
    absl::StatusOr<v1::MatmulResponse> response =
        daemon.client().Matmul(*request, absl::Seconds(60));
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->request_id(), static_cast<uint64_t>(i));
    EXPECT_EQ(response->backend(), "cpu");
    EXPECT_EQ(response->kernel(), "openblas_sgemm");
    EXPECT_GT(response->timing().total_seconds(), 0.0);
    absl::StatusOr<double> error = CheckResponse(*request, *response);
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_LT(*error, DefaultTolerance(spec.resolved_out_dtype()));
    fp32_cases += spec.resolved_out_dtype() == DType::kFP32;
    batched_cases += spec.batch > 1;
  }
  EXPECT_GT(fp32_cases, 5);
  EXPECT_GT(batched_cases, 5);
  // The metrics saw them: 60 OK requests and their FLOPs.
  const std::string metrics = daemon.server().metrics().Scrape();
  EXPECT_EQ(MetricValue(metrics, "matmul_requests_total{code=\"ok\"}"), 60);
  EXPECT_NE(metrics.find("matmul_flops_total{"), std::string::npos);
  EXPECT_NE(metrics.find("matmul_request_duration_seconds_bucket{"),
            std::string::npos);
}

TEST(IntegrationTest, AsyncAndStreamCallsAnswerEveryRequest) {
  TestDaemon daemon;
  std::mt19937_64 rng(7);
  std::vector<v1::MatmulRequest> requests;
  for (int i = 0; i < 12; ++i) {
    ProblemSpec spec{.m = 31 + i, .n = 17, .k = 64 - i, .transpose_b = true};
    absl::StatusOr<v1::MatmulRequest> request = MakeRandomRequest(spec, rng);
    ASSERT_TRUE(request.ok());
    request->set_request_id(1000 + i);
    requests.push_back(*std::move(request));
  }
  // A bad request in the middle gets an in-band error; the stream goes on.
  requests[5].mutable_b()->mutable_inline_data()->resize(3);
  absl::StatusOr<std::vector<v1::MatmulResponse>> responses =
      daemon.client().MatmulStream(requests, absl::Seconds(60));
  ASSERT_TRUE(responses.ok()) << responses.status();
  ASSERT_EQ(responses->size(), requests.size());
  int answered = 0;
  for (const v1::MatmulResponse& response : *responses) {
    const int index = static_cast<int>(response.request_id()) - 1000;
    ASSERT_GE(index, 0);
    ASSERT_LT(index, 12);
    if (index == 5) {
      EXPECT_EQ(response.status_code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_THAT(response.status_message(), HasSubstr("B: inline_data"));
      continue;
    }
    ASSERT_EQ(response.status_code(), 0) << response.status_message();
    absl::StatusOr<double> error = CheckResponse(requests[index], response);
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_LT(*error, 1e-2);
    ++answered;
  }
  EXPECT_EQ(answered, 11);

  std::vector<std::future<absl::StatusOr<v1::MatmulResponse>>> futures;
  for (int i = 0; i < 12; ++i) {
    if (i == 5) continue;
    futures.push_back(
        daemon.client().MatmulFuture(requests[i], absl::Seconds(60)));
  }
  for (auto& future : futures) {
    absl::StatusOr<v1::MatmulResponse> response = future.get();
    ASSERT_TRUE(response.ok()) << response.status();
    const int index = static_cast<int>(response->request_id()) - 1000;
    EXPECT_LT(*CheckResponse(requests[index], *response), 1e-2);
  }
}

// Unary calls on either gRPC API, with small products on the calling
// thread or always on a worker: products small and large (an output over
// kZeroCopyOutputBytes travels as its own slice), in turn and at once,
// match FP64, and a bad request is refused with its reason.
TEST(IntegrationTest, UnaryCallsOnEitherApiAndThreadMatchFp64) {
  for (UnaryApi api :
       {UnaryApi::kCallback, UnaryApi::kSync, UnaryApi::kCallbackRunSmall}) {
    for (double max_mflop : {0.0, 64.0}) {
      SCOPED_TRACE(absl::StrCat("unary api ", static_cast<int>(api),
                                ", caller_thread_max_mflop ", max_mflop));
      ServerOptions options = TestDaemon::DefaultOptions();
      options.service.unary_api = api;
      options.service.admission.caller_thread_max_mflop = max_mflop;
      TestDaemon daemon(options);
      std::mt19937_64 rng(5);
      std::vector<v1::MatmulRequest> requests;
      for (ProblemSpec spec :
           {ProblemSpec{.m = 1, .n = 1, .k = 1},
            ProblemSpec{.m = 33, .n = 65, .k = 17},
            ProblemSpec{.m = 256, .n = 300, .k = 8, .transpose_b = true},
            ProblemSpec{.m = 300, .n = 260, .k = 600}}) {
        absl::StatusOr<v1::MatmulRequest> request =
            MakeRandomRequest(spec, rng);
        ASSERT_TRUE(request.ok());
        request->set_request_id(requests.size());
        requests.push_back(*std::move(request));
      }
      for (const v1::MatmulRequest& request : requests) {
        absl::StatusOr<v1::MatmulResponse> response =
            daemon.client().Matmul(request, absl::Seconds(60));
        ASSERT_TRUE(response.ok()) << response.status();
        EXPECT_EQ(response->request_id(), request.request_id());
        EXPECT_LT(*CheckResponse(request, *response), 1e-2);
      }
      std::vector<std::future<absl::StatusOr<v1::MatmulResponse>>> futures;
      for (int round = 0; round < 3; ++round) {
        for (const v1::MatmulRequest& request : requests) {
          futures.push_back(
              daemon.client().MatmulFuture(request, absl::Seconds(60)));
        }
      }
      for (auto& future : futures) {
        absl::StatusOr<v1::MatmulResponse> response = future.get();
        ASSERT_TRUE(response.ok()) << response.status();
        EXPECT_LT(*CheckResponse(requests[response->request_id()], *response),
                  1e-2);
      }
      v1::MatmulRequest bad = requests[1];
      bad.mutable_b()->mutable_inline_data()->resize(3);
      absl::StatusOr<v1::MatmulResponse> refused =
          daemon.client().Matmul(bad, absl::Seconds(60));
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(refused.status().message(), HasSubstr("B: inline_data"));
      const std::string metrics = daemon.server().metrics().Scrape();
      EXPECT_EQ(MetricValue(metrics, "matmul_requests_total{code=\"ok\"}"), 16);
    }
  }
}

TEST(IntegrationTest, ServerInfoDescribesBackendAndLimits) {
  TestDaemon daemon;
  absl::StatusOr<v1::GetServerInfoResponse> info =
      daemon.client().GetServerInfo(absl::Seconds(10));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->backend(), "cpu");
  EXPECT_FALSE(info->version().empty());
  ASSERT_EQ(info->devices_size(), 1);
  EXPECT_GT(info->devices(0).multiprocessors(), 0);
  EXPECT_EQ(info->limits().max_message_bytes(), int64_t{256} << 20);
}

// --- bad input: each gets its status and message, the daemon keeps serving.

class BadInputTest : public ::testing::Test {
 protected:
  v1::MatmulRequest Valid() {
    auto request = MakeRandomRequest({.m = 5, .n = 6, .k = 7}, rng_);
    EXPECT_TRUE(request.ok());
    return *request;
  }
  void ExpectRejected(const v1::MatmulRequest& request, absl::StatusCode code,
                      const std::string& text) {
    absl::StatusOr<v1::MatmulResponse> response =
        daemon_.client().Matmul(request, absl::Seconds(10));
    ASSERT_FALSE(response.ok()) << "the daemon accepted a bad request";
    EXPECT_EQ(response.status().code(), code) << response.status();
    EXPECT_THAT(std::string(response.status().message()), HasSubstr(text));
    // Still serving.
    v1::MatmulRequest good = Valid();
    absl::StatusOr<v1::MatmulResponse> after =
        daemon_.client().Matmul(good, absl::Seconds(10));
    ASSERT_TRUE(after.ok()) << after.status();
    EXPECT_LT(*CheckResponse(good, *after), 1e-2);
  }

  std::mt19937_64 rng_{99};
  TestDaemon daemon_;
};

TEST_F(BadInputTest, MissingOperand) {
  v1::MatmulRequest request = Valid();
  request.clear_a();
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "missing operand A");
  request = Valid();
  request.clear_b();
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "missing operand B");
}

TEST_F(BadInputTest, UnspecifiedOrUnsupportedDtype) {
  v1::MatmulRequest request = Valid();
  request.mutable_a()->set_dtype(v1::DTYPE_UNSPECIFIED);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "A: dtype is unspecified; expected DTYPE_BF16");
  request = Valid();
  request.mutable_b()->set_dtype(v1::DTYPE_FP32);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "B: dtype DTYPE_FP32 is not supported for inputs");
  request = Valid();
  request.set_out_dtype(static_cast<v1::DType>(9));
  ExpectRejected(request, absl::StatusCode::kInvalidArgument, "unknown dtype");
}

TEST_F(BadInputTest, RankNotTwoOrThree) {
  v1::MatmulRequest request = Valid();
  request.mutable_a()->clear_shape();
  request.mutable_a()->add_shape(35);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument, "A: rank 1");
  request = Valid();
  request.mutable_b()->clear_shape();
  for (int64_t d : {1, 1, 7, 6}) request.mutable_b()->add_shape(d);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument, "B: rank 4");
}

TEST_F(BadInputTest, InnerDimensionsDisagree) {
  v1::MatmulRequest request = Valid();
  request.set_transpose_b(true);  // B [7, 6] read as [6, 7]^T: K 6 != 7
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "inner dimensions disagree");
}

TEST_F(BadInputTest, ZeroNegativeAndOverflowingDimensions) {
  v1::MatmulRequest request = Valid();
  request.mutable_a()->set_shape(0, 0);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "dimension 0 is 0");
  request.mutable_a()->set_shape(0, -5);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "dimension 0 is -5");
  request.mutable_a()->set_shape(0, int64_t{1} << 40);  // over max_dimension
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "expected 1 to 16777216");
  // In range one by one; the product of the dimensions overflows 64 bits.
  request = Valid();
  request.mutable_a()->clear_shape();
  for (int i = 0; i < 3; ++i) request.mutable_a()->add_shape(int64_t{1} << 23);
  request.mutable_a()->add_strides(int64_t{1} << 62);
  request.mutable_a()->add_strides(int64_t{1} << 30);
  request.mutable_a()->add_strides(1);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "overflows 64 bits");
}

TEST_F(BadInputTest, BadStrides) {
  v1::MatmulRequest request = Valid();
  request.mutable_a()->add_strides(-7);
  request.mutable_a()->add_strides(1);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "stride 0 is -7; strides must be >= 0");
  request = Valid();
  request.mutable_a()->add_strides(8);  // rows padded to 8: needs 39 elements
  request.mutable_a()->add_strides(1);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "reach outside the data");
  request = Valid();
  request.set_beta(1.0f);
  auto c = MakeRandomRequest({.m = 5, .n = 6, .k = 1, .beta = 1.0f}, rng_);
  *request.mutable_c() = c->c();
  request.mutable_c()->add_strides(1);  // rows step by one element: overlap
  request.mutable_c()->add_strides(1);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "make elements overlap");
}

TEST_F(BadInputTest, InlineBytesOfTheWrongLength) {
  v1::MatmulRequest request = Valid();
  request.mutable_b()->mutable_inline_data()->append("xx");
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "B: inline_data has 86 bytes; expected 84");
}

TEST_F(BadInputTest, BatchesThatCannotBroadcast) {
  auto request = MakeRandomRequest({.m = 5, .n = 6, .k = 7, .batch = 3}, rng_);
  auto other = MakeRandomRequest({.m = 5, .n = 6, .k = 7, .batch = 2}, rng_);
  *request->mutable_b() = other->b();
  ExpectRejected(*request, absl::StatusCode::kInvalidArgument,
                 "batch sizes disagree: A has 3, B has 2");
}

// A call whose timeout has already passed is never sent, by either call
// style (gRPC would race its deadline timer against a fast answer).
TEST_F(BadInputTest, ExpiredDeadline) {
  absl::StatusOr<v1::MatmulResponse> response =
      daemon_.client().Matmul(Valid(), absl::ZeroDuration());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kDeadlineExceeded)
      << response.status();
  response = daemon_.client().MatmulFuture(Valid(), absl::Seconds(-1)).get();
  EXPECT_EQ(response.status().code(), absl::StatusCode::kDeadlineExceeded)
      << response.status();
}

TEST(MessageLimitTest, RequestOverTheSizeLimitIsResourceExhausted) {
  ServerOptions options = TestDaemon::DefaultOptions();
  options.service.admission.limits.max_message_bytes = 64 << 10;
  TestDaemon daemon(options);
  std::mt19937_64 rng(5);
  auto big = MakeRandomRequest({.m = 200, .n = 8, .k = 200}, rng);  // 80 KB A
  absl::StatusOr<v1::MatmulResponse> response =
      daemon.client().Matmul(*big, absl::Seconds(10));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kResourceExhausted)
      << response.status();
  // A result that would not fit the response either.
  auto wide = MakeRandomRequest({.m = 200, .n = 200, .k = 1}, rng);  // 80 KB C
  response = daemon.client().Matmul(*wide, absl::Seconds(10));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(response.status().message()),
              HasSubstr("over the limit"));
  auto small = MakeRandomRequest({.m = 20, .n = 20, .k = 20}, rng);
  response = daemon.client().Matmul(*small, absl::Seconds(10));
  ASSERT_TRUE(response.ok()) << response.status();
}

TEST(QueueTest, FullQueueAndQueuedDeadline) {
  ServerOptions options = TestDaemon::DefaultOptions();
  options.executor.worker_threads = 1;
  options.executor.batching.max_queue_size = 1;
  TestDaemon daemon(options);
  auto metric = [&](const std::string& series) {
    return MetricValue(daemon.server().metrics().Scrape(), series);
  };
  std::mt19937_64 rng(11);
  // A slow product (seconds on one core) occupies the only worker...
  auto slow = MakeRandomRequest({.m = 3000, .n = 3000, .k = 3000}, rng);
  auto running = daemon.client().MatmulFuture(*slow, absl::Seconds(120));
  ASSERT_TRUE(WaitFor([&] { return daemon.server().running() == 1; }));
  // ...one request waits in the queue, with a deadline it will miss there
  // (sent over a second connection, which the 36 MB transfer on the first
  // cannot hold up)...
  ClientOptions second_options;
  second_options.wait_for_ready = true;
  auto second = Client::Create(daemon.target(), second_options);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE((*second)->WaitForConnected(absl::Seconds(10)).ok());
  auto small = MakeRandomRequest({.m = 8, .n = 8, .k = 8}, rng);
  auto queued = (*second)->MatmulFuture(*small, absl::Milliseconds(300));
  ASSERT_TRUE(WaitFor([&] { return daemon.server().queue_depth() == 1; }));
  // ...and the next is refused at once.
  absl::StatusOr<v1::MatmulResponse> refused =
      (*second)->Matmul(*small, absl::Seconds(10));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted)
      << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("queue is full"));
  EXPECT_EQ(queued.get().status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(running.get().ok());
  // The expired request never ran: only the slow one counted as OK.
  EXPECT_TRUE(WaitFor([&] {
    return metric("matmul_requests_total{code=\"deadline_exceeded\"}") == 1;
  }));
  EXPECT_EQ(metric("matmul_requests_total{code=\"ok\"}"), 1);
  EXPECT_EQ(metric("matmul_requests_total{code=\"resource_exhausted\"}"), 1);
}

}  // namespace
}  // namespace matmul
