#include "common/grpc_transport_args.h"

#include <grpcpp/resource_quota.h>

#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace matmul {
namespace {

struct ShortName {
  const char* name;
  const char* grpc_name;
};

constexpr ShortName kShortNames[] = {
    {"flow_control_window", GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES},
    {"max_frame_size", GRPC_ARG_HTTP2_MAX_FRAME_SIZE},
    {"bdp_probe", GRPC_ARG_HTTP2_BDP_PROBE},
    {"write_buffer_size", GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE},
    {"read_chunk_size", GRPC_ARG_TCP_READ_CHUNK_SIZE},
    {"max_read_chunk_size", GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE},
};

}  // namespace

std::string GrpcTransportArgs::ToString() const {
  std::vector<std::string> parts;
  for (const auto& [name, value] : ints) {
    parts.push_back(absl::StrCat(name, "=", value));
  }
  for (const auto& [name, value] : strings) {
    parts.push_back(absl::StrCat(name, "=", value));
  }
  if (resource_quota_bytes > 0) {
    parts.push_back(
        absl::StrCat("resource_quota_bytes=", resource_quota_bytes));
  }
  return absl::StrJoin(parts, ",");
}

absl::StatusOr<GrpcTransportArgs> ParseGrpcTransportArgs(
    absl::string_view text) {
  GrpcTransportArgs args;
  for (absl::string_view pair :
       absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    pair = absl::StripAsciiWhitespace(pair);
    const size_t equals = pair.find('=');
    if (equals == absl::string_view::npos || equals == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("gRPC setting '", pair, "' is not name=value"));
    }
    const absl::string_view name = pair.substr(0, equals);
    const absl::string_view value = pair.substr(equals + 1);
    int64_t number = 0;
    const bool is_number = absl::SimpleAtoi(value, &number);
    if (name == "resource_quota_bytes") {
      if (!is_number || number < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "resource_quota_bytes is '", value, "'; expected bytes >= 1"));
      }
      args.resource_quota_bytes = number;
      continue;
    }
    const char* grpc_name = nullptr;
    for (const ShortName& known : kShortNames) {
      if (name == known.name) grpc_name = known.grpc_name;
    }
    if (grpc_name == nullptr && name.find('.') == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown gRPC setting '", name,
          "'; use flow_control_window, max_frame_size, bdp_probe, "
          "write_buffer_size, read_chunk_size, max_read_chunk_size, "
          "resource_quota_bytes or a gRPC argument name (grpc....)"));
    }
    const std::string full_name(grpc_name != nullptr ? grpc_name : name);
    const bool fits_int = is_number &&
                          number >= std::numeric_limits<int>::min() &&
                          number <= std::numeric_limits<int>::max();
    if (fits_int) {
      args.ints.emplace_back(full_name, static_cast<int>(number));
    } else if (grpc_name != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " is '", value, "'; expected a 32-bit integer"));
    } else {
      args.strings.emplace_back(full_name, std::string(value));
    }
  }
  return args;
}

void ApplyGrpcTransportArgs(const GrpcTransportArgs& args,
                            grpc::ChannelArguments& channel) {
  for (const auto& [name, value] : args.ints) channel.SetInt(name, value);
  for (const auto& [name, value] : args.strings) channel.SetString(name, value);
  if (args.resource_quota_bytes > 0) {
    grpc::ResourceQuota quota("grpc_transport_args");
    quota.Resize(static_cast<size_t>(args.resource_quota_bytes));
    channel.SetResourceQuota(quota);
  }
}

void ApplyGrpcTransportArgs(const GrpcTransportArgs& args,
                            grpc::ServerBuilder& server) {
  for (const auto& [name, value] : args.ints) {
    server.AddChannelArgument(name, value);
  }
  for (const auto& [name, value] : args.strings) {
    server.AddChannelArgument(name, value);
  }
  if (args.resource_quota_bytes > 0) {
    grpc::ResourceQuota quota("grpc_transport_args");
    quota.Resize(static_cast<size_t>(args.resource_quota_bytes));
    server.SetResourceQuota(quota);
  }
}

}  // namespace matmul
