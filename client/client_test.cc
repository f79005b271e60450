// matmul::Client against an in-process fake MatmulService on a temporary
// unix socket: exercises the channel, status mapping, deadlines, the async
// and streaming paths and the message limit without the real daemon.
#include "client/client.h"

#include <unistd.h>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "client/request_builder.h"
#include "common/bf16.h"
#include "gmock/gmock.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

// request_id values the fake treats specially.
constexpr uint64_t kRejectedId = 13;  // answered INVALID_ARGUMENT
constexpr uint64_t kSlowId = 99;      // answered after kSlowDelay
constexpr absl::Duration kSlowDelay = absl::Milliseconds(300);

// Answers with the FP64 reference, packed as the daemon packs its output.
absl::StatusOr<v1::MatmulResponse> Solve(const v1::MatmulRequest& request) {
  absl::StatusOr<GemmProblem> problem = GemmProblemFromRequest(request);
  if (!problem.ok()) return problem.status();
  absl::StatusOr<std::vector<double>> values = ReferenceResult(request);
  if (!values.ok()) return values.status();
  std::vector<int64_t> shape = {problem->m, problem->n};
  if (request.a().shape_size() == 3 || request.b().shape_size() == 3) {
    shape.insert(shape.begin(), problem->batch);
  }
  v1::MatmulResponse response;
  response.set_request_id(request.request_id());
  response.set_backend("fake");
  response.set_kernel("reference_gemm");
  absl::StatusOr<v1::Tensor> c;
  if (problem->c_dtype == DType::kFP32) {
    std::vector<float> narrowed(values->begin(), values->end());
    c = MakeInlineTensor(DType::kFP32, shape, narrowed.data());
  } else {
    std::vector<uint16_t> narrowed;
    for (double v : *values) narrowed.push_back(FloatToBf16(v));
    c = MakeInlineTensor(DType::kBF16, shape, narrowed.data());
  }
  if (!c.ok()) return c.status();
  *response.mutable_c() = *std::move(c);
  return response;
}

class FakeMatmulService final : public v1::MatmulService::Service {
 public:
  grpc::Status Matmul(grpc::ServerContext*, const v1::MatmulRequest* request,
                      v1::MatmulResponse* response) override {
    if (request->request_id() == kRejectedId) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "K of A (4) and K of B (5) disagree");
    }
    if (request->request_id() == kSlowId) absl::SleepFor(kSlowDelay);
    absl::StatusOr<v1::MatmulResponse> solved = Solve(*request);
    if (!solved.ok()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          std::string(solved.status().message()));
    }
    *response = *std::move(solved);
    return grpc::Status::OK;
  }

  grpc::Status MatmulStream(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::MatmulResponse, v1::MatmulRequest>* stream)
      override {
    v1::MatmulRequest request;
    while (stream->Read(&request)) {
      v1::MatmulResponse response;
      if (request.request_id() == kRejectedId) {
        response.set_request_id(request.request_id());
        response.set_status_code(
            static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
        response.set_status_message("rejected by the fake");
      } else {
        response = *Solve(request);
      }
      stream->Write(response);
    }
    return grpc::Status::OK;
  }

  grpc::Status GetServerInfo(grpc::ServerContext*,
                             const v1::GetServerInfoRequest*,
                             v1::GetServerInfoResponse* response) override {
    response->set_version("test");
    response->set_backend("fake");
    response->mutable_limits()->set_max_message_bytes(int64_t{256} << 20);
    return grpc::Status::OK;
  }
};

class ClientTest : public ::testing::Test {
 protected:
  // A fresh fake server per test (it starts in milliseconds) keeps tests
  // independent and needs no static state.
  void SetUp() override {
    socket_path_ = absl::StrCat(::testing::TempDir(), "matmul_client_test_",
                                getpid(), ".sock");
    unlink(socket_path_.c_str());
    grpc::ServerBuilder builder;
    builder.AddListeningPort(target(), grpc::InsecureServerCredentials());
    builder.RegisterService(&service_);
    builder.SetMaxReceiveMessageSize(64 << 20);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    unlink(socket_path_.c_str());
  }

  std::string target() const { return absl::StrCat("unix:", socket_path_); }

  std::unique_ptr<Client> MakeClient(ClientOptions options = {}) {
    options.wait_for_ready = true;
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Create(target(), options);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  static v1::MatmulRequest RandomRequest(uint64_t id,
                                         ProblemSpec spec = {
                                             .m = 9, .n = 7, .k = 5}) {
    std::mt19937_64 rng(id);
    v1::MatmulRequest request = *MakeRandomRequest(spec, rng);
    request.set_request_id(id);
    return request;
  }

  std::string socket_path_;
  FakeMatmulService service_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(ClientTest, CreateRejectsBadArguments) {
  EXPECT_EQ(Client::Create("").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Client::Create(target(), {.max_message_bytes = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Client::Create(target(), {.default_timeout = absl::ZeroDuration()})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, SyncMatmulReturnsTheProduct) {
  std::unique_ptr<Client> client = MakeClient();
  ASSERT_TRUE(client->WaitForConnected(absl::Seconds(10)).ok());
  v1::MatmulRequest request = RandomRequest(1, {.m = 33,
                                                .n = 17,
                                                .k = 65,
                                                .batch = 2,
                                                .transpose_b = true,
                                                .alpha = 2.0f,
                                                .beta = -1.0f,
                                                .out_dtype = DType::kFP32});
  absl::StatusOr<v1::MatmulResponse> response =
      client->Matmul(request, absl::Seconds(10));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->request_id(), 1u);
  EXPECT_EQ(response->backend(), "fake");
  absl::StatusOr<double> error = CheckResponse(request, *response);
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_LT(*error, 1e-6);
}

TEST_F(ClientTest, ServerStatusKeepsCodeAndMessage) {
  std::unique_ptr<Client> client = MakeClient();
  absl::StatusOr<v1::MatmulResponse> response =
      client->Matmul(RandomRequest(kRejectedId));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(response.status().message(), "K of A (4) and K of B (5) disagree");
}

TEST_F(ClientTest, DeadlineExceeded) {
  std::unique_ptr<Client> client = MakeClient();
  absl::StatusOr<v1::MatmulResponse> response =
      client->Matmul(RandomRequest(kSlowId), absl::Milliseconds(50));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(ClientTest, MessageOverTheLimitIsResourceExhausted) {
  std::unique_ptr<Client> client = MakeClient({.max_message_bytes = 4096});
  absl::StatusOr<v1::MatmulResponse> response =
      client->Matmul(RandomRequest(2, {.m = 64, .n = 64, .k = 64}));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kResourceExhausted)
      << response.status();
}

TEST_F(ClientTest, AsyncCallsCompleteConcurrently) {
  std::unique_ptr<Client> client = MakeClient();
  constexpr int kCalls = 16;
  absl::BlockingCounter pending(kCalls);
  std::atomic<int> passed = 0;
  for (int i = 0; i < kCalls; ++i) {
    v1::MatmulRequest request = RandomRequest(100 + i);
    v1::MatmulRequest copy = request;
    client->MatmulAsync(
        std::move(copy), absl::Seconds(10),
        [&, request = std::move(request)](
            absl::StatusOr<v1::MatmulResponse> response) {
          if (response.ok() && response->request_id() == request.request_id() &&
              CheckResponse(request, *response).value_or(1.0) < 1e-2) {
            ++passed;
          }
          pending.DecrementCount();
        });
  }
  pending.Wait();
  EXPECT_EQ(passed, kCalls);
}

TEST_F(ClientTest, AsyncErrorsReachTheCallback) {
  std::unique_ptr<Client> client = MakeClient();
  std::future<absl::StatusOr<v1::MatmulResponse>> rejected =
      client->MatmulFuture(RandomRequest(kRejectedId), absl::Seconds(10));
  std::future<absl::StatusOr<v1::MatmulResponse>> late =
      client->MatmulFuture(RandomRequest(kSlowId), absl::Milliseconds(50));
  std::future<absl::StatusOr<v1::MatmulResponse>> fine =
      client->MatmulFuture(RandomRequest(3), absl::Seconds(10));
  EXPECT_EQ(rejected.get().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(late.get().status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(fine.get().ok());
}

TEST_F(ClientTest, DestructorWaitsForAsyncCallbacks) {
  std::atomic<bool> called = false;
  {
    std::unique_ptr<Client> client = MakeClient();
    client->MatmulAsync(
        RandomRequest(kSlowId), absl::Seconds(10),
        [&called](absl::StatusOr<v1::MatmulResponse>) { called = true; });
  }
  EXPECT_TRUE(called);
}

TEST_F(ClientTest, StreamCarriesPerRequestStatus) {
  std::unique_ptr<Client> client = MakeClient();
  std::vector<v1::MatmulRequest> requests;
  absl::flat_hash_map<uint64_t, const v1::MatmulRequest*> requests_by_id;
  for (uint64_t id : {uint64_t{1}, uint64_t{2}, kRejectedId, uint64_t{4}}) {
    requests.push_back(RandomRequest(id));
  }
  for (const v1::MatmulRequest& request : requests) {
    requests_by_id[request.request_id()] = &request;
  }
  absl::StatusOr<std::vector<v1::MatmulResponse>> responses =
      client->MatmulStream(requests, absl::Seconds(10));
  ASSERT_TRUE(responses.ok()) << responses.status();
  ASSERT_EQ(responses->size(), requests.size());
  int rejected = 0;
  for (const v1::MatmulResponse& response : *responses) {
    if (response.request_id() == kRejectedId) {
      EXPECT_EQ(ResponseStatus(response).code(),
                absl::StatusCode::kInvalidArgument);
      ++rejected;
      continue;
    }
    EXPECT_TRUE(ResponseStatus(response).ok());
    ASSERT_TRUE(requests_by_id.contains(response.request_id()));
    const v1::MatmulRequest& request = *requests_by_id[response.request_id()];
    EXPECT_LT(CheckResponse(request, response).value_or(1.0), 1e-2);
  }
  EXPECT_EQ(rejected, 1);
}

TEST_F(ClientTest, GetServerInfo) {
  std::unique_ptr<Client> client = MakeClient();
  absl::StatusOr<v1::GetServerInfoResponse> info = client->GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->backend(), "fake");
  EXPECT_EQ(info->version(), "test");
}

TEST(ClientWithoutServerTest, UnavailableWhenNothingListens) {
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(absl::StrCat(
      "unix:", ::testing::TempDir(), "matmul_nobody_", getpid(), ".sock"));
  ASSERT_TRUE(client.ok()) << client.status();
  absl::Status connected = (*client)->WaitForConnected(absl::Milliseconds(100));
  EXPECT_EQ(connected.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(connected.message(), HasSubstr("matmul-server"));
  EXPECT_EQ((*client)->GetServerInfo(absl::Seconds(5)).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace matmul
