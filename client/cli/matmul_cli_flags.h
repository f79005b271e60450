// matmul-cli's flags, shared by its subcommands (bench adds its own in
// matmul_cli_bench.cc), and the check that makes every flag mistake a usage
// error. The flags' help text says which subcommand reads each one.
#ifndef MATMUL_CLIENT_CLI_MATMUL_CLI_FLAGS_H_
#define MATMUL_CLIENT_CLI_MATMUL_CLI_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/client.h"

ABSL_DECLARE_FLAG(std::string, target);
ABSL_DECLARE_FLAG(std::string, local_target);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_server_name);
ABSL_DECLARE_FLAG(bool, json);
ABSL_DECLARE_FLAG(absl::Duration, timeout);
ABSL_DECLARE_FLAG(std::string, shape);
ABSL_DECLARE_FLAG(bool, transpose_a);
ABSL_DECLARE_FLAG(bool, transpose_b);
ABSL_DECLARE_FLAG(int64_t, batch);
ABSL_DECLARE_FLAG(bool, broadcast_a);
ABSL_DECLARE_FLAG(bool, broadcast_b);
ABSL_DECLARE_FLAG(float, alpha);
ABSL_DECLARE_FLAG(float, beta);
ABSL_DECLARE_FLAG(std::string, out_dtype);
ABSL_DECLARE_FLAG(int64_t, iterations);
ABSL_DECLARE_FLAG(bool, check);
ABSL_DECLARE_FLAG(double, tolerance);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(std::string, mode);
ABSL_DECLARE_FLAG(bool, ring);
ABSL_DECLARE_FLAG(std::string, shm_prefix);

namespace matmul::cli {

// The file these flags are defined in, for matmul::HelpListsFlagsFrom.
inline constexpr char kFlagsFile[] = "matmul_cli_flags.cc";

// absl::ParseCommandLine exits 1 on an unknown flag or a malformed value;
// this CLI promises 2 for every usage error, so check both first. Accepts
// --name=value, --name value, --bool_flag and --nobool_flag.
absl::Status CheckFlagSyntax(int argc, char** argv);

// The target run and bench connect to for `mode`: `target` itself, except
// for a mode that uses regions (not "inline") and a target that is not this
// host's unix socket (it may name daemons elsewhere, or several): then
// --local_target, and a line on stderr says so.
std::string TargetForMode(const std::string& target, absl::string_view mode);

// The client options every subcommand shares: its timeout and TLS flags.
ClientOptions CliClientOptions(absl::Duration timeout);

}  // namespace matmul::cli

#endif  // MATMUL_CLIENT_CLI_MATMUL_CLI_FLAGS_H_
