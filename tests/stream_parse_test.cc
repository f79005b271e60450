// A MatmulStream message that is not a MatmulRequest gets an in-band
// INVALID_ARGUMENT and the stream goes on (issue 18, finding 7): before,
// the failed parse looked like a half-close, the stream ended OK and the
// requests after it were never answered. The client here writes raw bytes,
// as a buggy or hostile client would.
#include <grpcpp/grpcpp.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "client/request_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_daemon.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

grpc::ByteBuffer Bytes(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

TEST(StreamParseTest, GarbageGetsAnInBandErrorAndTheStreamGoesOn) {
  TestDaemon daemon;
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(daemon.target(), grpc::InsecureChannelCredentials());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(60));
  // A bidi stream of raw bytes on the service's method: what the generated
  // stub does, minus the serialisation.
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>
      stream(grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer,
                                                       grpc::ByteBuffer>::
                 Create(channel.get(),
                        grpc::internal::RpcMethod(
                            "/matmul.v1.MatmulService/MatmulStream",
                            grpc::internal::RpcMethod::BIDI_STREAMING),
                        &context));
  std::mt19937_64 rng(7);
  std::map<uint64_t, v1::MatmulRequest> valid;
  const std::string garbage[] = {
      std::string("\x0f", 1),  // field 1 with wire type 7
      std::string("\x0a\x05"
                  "ab",
                  4),           // a length past the end
      std::string(11, '\xff'),  // a varint tag that never ends
  };
  for (int i = 0; i < 4; ++i) {
    auto request = MakeRandomRequest({.m = 9 + i, .n = 7, .k = 5 + 2 * i}, rng);
    ASSERT_TRUE(request.ok());
    request->set_request_id(100 + i);
    valid[100 + i] = *request;
    ASSERT_TRUE(stream->Write(Bytes(request->SerializeAsString())));
    if (i < 3) {
      ASSERT_TRUE(stream->Write(Bytes(garbage[i])));
    }
  }
  ASSERT_TRUE(stream->WritesDone());
  int answered = 0;
  int refused = 0;
  grpc::ByteBuffer bytes;
  while (stream->Read(&bytes)) {
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(bytes.Dump(&slices).ok());
    std::string flat;
    for (const grpc::Slice& slice : slices) {
      flat.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    v1::MatmulResponse response;
    ASSERT_TRUE(response.ParseFromString(flat));
    if (response.status_code() == 0) {
      auto it = valid.find(response.request_id());
      ASSERT_NE(it, valid.end()) << response.request_id();
      absl::StatusOr<double> error = CheckResponse(it->second, response);
      ASSERT_TRUE(error.ok()) << error.status();
      EXPECT_LT(*error, 1e-2);
      valid.erase(it);
      ++answered;
    } else {
      EXPECT_EQ(response.status_code(),
                static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
      EXPECT_EQ(response.request_id(), 0u);
      EXPECT_THAT(response.status_message(),
                  HasSubstr("not a serialized matmul.v1.MatmulRequest"));
      ++refused;
    }
  }
  EXPECT_EQ(answered, 4);
  EXPECT_EQ(refused, 3);
  EXPECT_TRUE(valid.empty());
  const grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
}

}  // namespace
}  // namespace matmul
