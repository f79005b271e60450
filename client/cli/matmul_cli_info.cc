#include "client/cli/matmul_cli_info.h"

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cli/exit_codes.h"
#include "client/cli/matmul_cli_flags.h"
#include "client/client.h"
#include "client/request_builder.h"
#include "google/protobuf/util/json_util.h"

namespace matmul::cli {
namespace {

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  // Printing a well-formed message cannot fail; an empty object if it did.
  if (!google::protobuf::util::MessageToJsonString(message, &json, options)
           .ok()) {
    return "{}\n";
  }
  return json;
}

std::string DTypeList(const google::protobuf::RepeatedField<int>& dtypes) {
  std::vector<std::string> names;
  for (int dtype : dtypes) {
    absl::StatusOr<DType> known = FromProtoDType(static_cast<v1::DType>(dtype));
    names.push_back(known.ok() ? DTypeName(*known)
                               : v1::DType_Name(static_cast<v1::DType>(dtype)));
  }
  return names.empty() ? "-" : absl::StrJoin(names, ", ");
}

std::string Bytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) {
    return absl::StrFormat("%.1f GiB", bytes / double(int64_t{1} << 30));
  }
  if (bytes >= (int64_t{1} << 20)) {
    return absl::StrFormat("%.1f MiB", bytes / double(int64_t{1} << 20));
  }
  return absl::StrCat(bytes, " B");
}

int RunInfo(absl::string_view target, absl::Duration timeout, bool json) {
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Create(std::string(target), CliClientOptions(timeout));
  if (!client.ok()) return UsageError(client.status().message());
  absl::StatusOr<v1::GetServerInfoResponse> info =
      (*client)->GetServerInfo(timeout);
  if (!info.ok()) return RpcError("GetServerInfo", info.status(), target);
  if (json) {
    std::cout << ToJson(*info);
    return kExitOk;
  }
  std::cout << absl::StreamFormat("target:   %s\n", target)
            << absl::StreamFormat("version:  %s\n", info->version())
            << absl::StreamFormat("backend:  %s\n", info->backend())
            << "devices:\n";
  for (int i = 0; i < info->devices_size(); ++i) {
    const v1::Device& device = info->devices(i);
    std::cout << absl::StreamFormat(
        "  [%d] %s: %s, %d %s, %s\n", i, device.name(),
        device.compute_capability().empty()
            ? "CPU"
            : absl::StrCat("compute capability ", device.compute_capability()),
        device.multiprocessors(),
        device.compute_capability().empty() ? "cores" : "SMs",
        device.memory_bytes() > 0
            ? absl::StrCat(Bytes(device.memory_bytes()), " memory")
            : "memory not reported");
  }
  if (info->devices_size() == 0) std::cout << "  (none reported)\n";
  const v1::Limits& limits = info->limits();
  std::cout << "limits:\n"
            << absl::StreamFormat("  max_message_bytes:       %d (%s)\n",
                                  limits.max_message_bytes(),
                                  Bytes(limits.max_message_bytes()))
            << absl::StreamFormat("  max_dimension:           %d\n",
                                  limits.max_dimension())
            << absl::StreamFormat("  max_tensor_bytes:        %d (%s)\n",
                                  limits.max_tensor_bytes(),
                                  Bytes(limits.max_tensor_bytes()))
            << absl::StreamFormat("  max_concurrent_requests: %d\n",
                                  limits.max_concurrent_requests())
            << absl::StreamFormat("  max_list_products:       %d\n",
                                  limits.max_list_products())
            << absl::StreamFormat("  max_list_scratch_bytes:  %d (%s)\n",
                                  limits.max_list_scratch_bytes(),
                                  Bytes(limits.max_list_scratch_bytes()))
            // An MPS client shares the GPU with other MPS clients without
            // context switches (and shares their faults): worth seeing.
            << absl::StreamFormat("mps client:    %s\n",
                                  info->mps_client() ? "yes" : "no")
            << absl::StreamFormat("input dtypes:  %s\n",
                                  DTypeList(info->supported_input_dtypes()))
            << absl::StreamFormat("output dtypes: %s\n",
                                  DTypeList(info->supported_output_dtypes()));
  return kExitOk;
}

}  // namespace

int RunInfoCommand() {
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  if (timeout <= absl::ZeroDuration()) {
    return UsageError("--timeout must be positive");
  }
  return RunInfo(absl::GetFlag(FLAGS_target), timeout,
                 absl::GetFlag(FLAGS_json));
}

}  // namespace matmul::cli
