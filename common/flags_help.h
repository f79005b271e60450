// absl's --help lists only the flags defined in files named after the
// binary (matmul-server -> "matmul-server.cc"); each of our tools defines
// its flags in a main file of another name. One call makes --help and
// --helpshort list the flags of files whose path ends with `file_suffix`.
#ifndef MATMUL_COMMON_FLAGS_HELP_H_
#define MATMUL_COMMON_FLAGS_HELP_H_

#include <string>

#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace matmul {

inline void HelpListsFlagsFrom(absl::string_view file_suffix) {
  absl::FlagsUsageConfig config;
  config.contains_help_flags =
      [suffix = std::string(file_suffix)](absl::string_view file) {
        return absl::EndsWith(file, suffix);
      };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace matmul

#endif  // MATMUL_COMMON_FLAGS_HELP_H_
