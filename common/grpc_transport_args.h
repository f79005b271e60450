// gRPC transport settings given on a command line, applied alike to a
// channel (the client side) and a server, so that both ends of a
// connection run with the same HTTP/2 flow-control window, frame size,
// BDP probing and memory quota. The text is a comma-separated list of
// name=value pairs:
//
//   flow_control_window=67108864,max_frame_size=16777215,bdp_probe=0
//
// Short names: flow_control_window (grpc.http2.lookahead_bytes, the
// initial stream window), max_frame_size (grpc.http2.max_frame_size),
// bdp_probe (grpc.http2.bdp_probe, 0 or 1), write_buffer_size
// (grpc.http2.write_buffer_size), read_chunk_size
// (grpc.experimental.tcp_read_chunk_size), max_read_chunk_size
// (grpc.experimental.tcp_max_read_chunk_size) and resource_quota_bytes (a
// grpc::ResourceQuota of that size, gRPC's buffer pool). Any other name
// that contains a '.' is passed to gRPC as it is (as an integer when the
// value is one), so settings without a short name can be tried too.
#ifndef MATMUL_COMMON_GRPC_TRANSPORT_ARGS_H_
#define MATMUL_COMMON_GRPC_TRANSPORT_ARGS_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace matmul {

struct GrpcTransportArgs {
  std::vector<std::pair<std::string, int>> ints;
  std::vector<std::pair<std::string, std::string>> strings;
  // 0: no quota of our own (gRPC's default).
  int64_t resource_quota_bytes = 0;

  bool empty() const {
    return ints.empty() && strings.empty() && resource_quota_bytes == 0;
  }
  // The settings as gRPC names them, "name=value,...", for reports.
  std::string ToString() const;
};

// INVALID_ARGUMENT names the offending pair: no '=', an unknown name
// without a '.', a short name whose value is not an integer in range.
absl::StatusOr<GrpcTransportArgs> ParseGrpcTransportArgs(
    absl::string_view text);

void ApplyGrpcTransportArgs(const GrpcTransportArgs& args,
                            grpc::ChannelArguments& channel);
void ApplyGrpcTransportArgs(const GrpcTransportArgs& args,
                            grpc::ServerBuilder& server);

}  // namespace matmul

#endif  // MATMUL_COMMON_GRPC_TRANSPORT_ARGS_H_
