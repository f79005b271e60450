#include "common/grpc_transport_args.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace matmul {
namespace {

using ::testing::Pair;
using ::testing::UnorderedElementsAre;

TEST(GrpcTransportArgsTest, ShortNamesBecomeGrpcNames) {
  absl::StatusOr<GrpcTransportArgs> args = ParseGrpcTransportArgs(
      "flow_control_window=67108864, max_frame_size=16777215,bdp_probe=0");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(args->ints,
              UnorderedElementsAre(Pair("grpc.http2.lookahead_bytes", 67108864),
                                   Pair("grpc.http2.max_frame_size", 16777215),
                                   Pair("grpc.http2.bdp_probe", 0)));
  EXPECT_TRUE(args->strings.empty());
  EXPECT_EQ(args->resource_quota_bytes, 0);
}

TEST(GrpcTransportArgsTest, FullNamesPassThroughAsIntOrString) {
  absl::StatusOr<GrpcTransportArgs> args = ParseGrpcTransportArgs(
      "grpc.http2.write_buffer_size=1048576,grpc.primary_user_agent=bench");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(args->ints, UnorderedElementsAre(
                              Pair("grpc.http2.write_buffer_size", 1048576)));
  EXPECT_THAT(args->strings,
              UnorderedElementsAre(Pair("grpc.primary_user_agent", "bench")));
}

TEST(GrpcTransportArgsTest, ResourceQuotaIsKeptApart) {
  absl::StatusOr<GrpcTransportArgs> args =
      ParseGrpcTransportArgs("resource_quota_bytes=1073741824");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->resource_quota_bytes, 1073741824);
  EXPECT_TRUE(args->ints.empty());
  EXPECT_EQ(args->ToString(), "resource_quota_bytes=1073741824");
}

TEST(GrpcTransportArgsTest, EmptyTextIsNoSettings) {
  absl::StatusOr<GrpcTransportArgs> args = ParseGrpcTransportArgs("");
  ASSERT_TRUE(args.ok());
  EXPECT_TRUE(args->empty());
}

TEST(GrpcTransportArgsTest, RejectsBadPairs) {
  EXPECT_FALSE(ParseGrpcTransportArgs("flow_control_window").ok());
  EXPECT_FALSE(ParseGrpcTransportArgs("=5").ok());
  EXPECT_FALSE(ParseGrpcTransportArgs("window=5").ok());
  EXPECT_FALSE(ParseGrpcTransportArgs("max_frame_size=big").ok());
  EXPECT_FALSE(ParseGrpcTransportArgs("max_frame_size=99999999999").ok());
  EXPECT_FALSE(ParseGrpcTransportArgs("resource_quota_bytes=0").ok());
}

TEST(GrpcTransportArgsTest, AppliesToChannelArguments) {
  absl::StatusOr<GrpcTransportArgs> args = ParseGrpcTransportArgs(
      "max_frame_size=1048576,resource_quota_bytes=4096");
  ASSERT_TRUE(args.ok());
  grpc::ChannelArguments channel;
  ApplyGrpcTransportArgs(*args, channel);
  grpc_channel_args c = channel.c_channel_args();
  bool frame_size = false;
  bool quota = false;
  for (size_t i = 0; i < c.num_args; ++i) {
    const std::string key = c.args[i].key;
    if (key == GRPC_ARG_HTTP2_MAX_FRAME_SIZE) {
      frame_size = c.args[i].value.integer == 1048576;
    }
    if (key == GRPC_ARG_RESOURCE_QUOTA) quota = true;
  }
  EXPECT_TRUE(frame_size);
  EXPECT_TRUE(quota);
}

}  // namespace
}  // namespace matmul
