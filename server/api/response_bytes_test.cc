#include "server/api/response_bytes.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace matmul {
namespace {

v1::MatmulResponse ResponseWithOutput(size_t bytes) {
  v1::MatmulResponse response;
  response.set_request_id(42);
  v1::Tensor* c = response.mutable_c();
  c->set_dtype(v1::DTYPE_BF16);
  c->add_shape(3);
  c->add_shape(static_cast<int64_t>(bytes / 6));
  std::string data(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>(i * 7 + 1);
  c->set_inline_data(std::move(data));
  response.set_backend("cpu");
  response.set_kernel("test_kernel");
  response.set_batch_size(3);
  response.mutable_timing()->set_kernel_seconds(0.25);
  return response;
}

v1::MatmulResponse Parse(grpc::ByteBuffer& buffer) {
  v1::MatmulResponse parsed;
  EXPECT_TRUE(grpc::SerializationTraits<v1::MatmulResponse>::Deserialize(
                  &buffer, &parsed)
                  .ok());
  return parsed;
}

TEST(ResponseBytesTest, LargeOutputTravelsWithoutCopyAndParsesBack) {
  const v1::MatmulResponse expected =
      ResponseWithOutput(kZeroCopyOutputBytes * 3);
  v1::MatmulResponse response = expected;
  const char* output_bytes = response.c().inline_data().data();
  grpc::ByteBuffer buffer = SerializeMatmulResponse(response);
  // The output moved into the buffer: its slice is the very memory the
  // response held.
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buffer.Dump(&slices).ok());
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(reinterpret_cast<const char*>(slices[1].begin()), output_bytes);
  // C's header appears twice: a few bytes over the plain serialization.
  EXPECT_GE(buffer.Length(), expected.ByteSizeLong());
  EXPECT_LE(buffer.Length(), expected.ByteSizeLong() + 16);
  const v1::MatmulResponse parsed = Parse(buffer);
  EXPECT_EQ(parsed.SerializeAsString(), expected.SerializeAsString());
  EXPECT_EQ(parsed.c().inline_data(), expected.c().inline_data());
  EXPECT_EQ(parsed.c().shape_size(), 2);
  EXPECT_EQ(parsed.kernel(), "test_kernel");
}

TEST(ResponseBytesTest, SmallOutputIsSerializedAsUsual) {
  const v1::MatmulResponse expected = ResponseWithOutput(96);
  v1::MatmulResponse response = expected;
  grpc::ByteBuffer buffer = SerializeMatmulResponse(response);
  std::string flat;
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buffer.Dump(&slices).ok());
  for (const grpc::Slice& slice : slices) {
    flat.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  EXPECT_EQ(flat, expected.SerializeAsString());
}

TEST(ResponseBytesTest, ResponseWithoutInlineOutput) {
  v1::MatmulResponse expected;
  expected.set_request_id(7);
  expected.set_batch_size(1);
  v1::MatmulResponse response = expected;
  grpc::ByteBuffer buffer = SerializeMatmulResponse(response);
  const v1::MatmulResponse parsed = Parse(buffer);
  EXPECT_EQ(parsed.SerializeAsString(), expected.SerializeAsString());
  EXPECT_FALSE(parsed.has_c());
}

}  // namespace
}  // namespace matmul
