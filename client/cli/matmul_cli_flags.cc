// matmul-cli's flags. Every file that defines matmul-cli flags has
// "matmul_cli" in its name: the syntax check below and `--help` pick this
// program's flags out of absl's registry by that.
#include "client/cli/matmul_cli_flags.h"

#include <cstdint>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/client.h"

ABSL_FLAG(std::string, target, "unix:/run/matmul/matmul.sock",
          "Daemon address: unix:/path/to.sock, host:port, or several daemons "
          "(a DNS name with several addresses, ipv4:a:port,b:port), over "
          "which inline products are spread round robin.");
ABSL_FLAG(std::string, local_target, "unix:/run/matmul/matmul.sock",
          "run and bench with --mode shm, ipc or vmm and a --target that is "
          "not a unix socket: the daemon on this host, which regions go to "
          "(they never leave their host).");
ABSL_FLAG(std::string, tls_ca, "",
          "TCP daemons serving TLS: the PEM CA that signed the daemon's "
          "certificate (turns TLS on).");
ABSL_FLAG(std::string, tls_cert, "",
          "With --tls_ca: this client's PEM certificate, for daemons that "
          "require one (--tls_client_ca there).");
ABSL_FLAG(std::string, tls_key, "", "The PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_server_name, "",
          "With --tls_ca: the name the daemon's certificate must carry, when "
          "it is not the target's host (an IP address, say).");
ABSL_FLAG(bool, json, false, "Print the result as one JSON object.");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(60),
          "Deadline of each RPC, e.g. 500ms, 30s, 2m.");
ABSL_FLAG(std::string, shape, "256x256x256",
          "run: the product's M, N and K, as MxNxK.");
ABSL_FLAG(bool, transpose_a, false, "run: send A as [K, M] with transpose_a.");
ABSL_FLAG(bool, transpose_b, false,
          "run: send B as [N, K] with transpose_b (PyTorch nn.Linear).");
ABSL_FLAG(int64_t, batch, 0,
          "run: leading batch dimension; 0 sends rank-2 operands.");
ABSL_FLAG(bool, broadcast_a, false,
          "run: with --batch, send one A for the whole batch (stride 0).");
ABSL_FLAG(bool, broadcast_b, false,
          "run: with --batch, send one B for the whole batch (stride 0).");
ABSL_FLAG(float, alpha, 1.0f, "run: C = alpha * op(A) op(B) + beta * C.");
ABSL_FLAG(float, beta, 0.0f,
          "run: nonzero sends a random initial C in the output dtype.");
ABSL_FLAG(std::string, out_dtype, "bf16", "run: output dtype, bf16 or fp32.");
ABSL_FLAG(int64_t, iterations, 1,
          "run: products to time (the same request each time); with more "
          "than one, min and median latency are reported.");
ABSL_FLAG(bool, check, false,
          "run: compare the first result with the local FP64 reference and "
          "exit 1 when the relative error reaches --tolerance. The reference "
          "is a plain triple loop: seconds for 1024^3, minutes beyond.");
ABSL_FLAG(double, tolerance, 0,
          "run: --check's relative error bound; 0 picks it from the output "
          "dtype: 1e-2 for bf16, 1e-4 for fp32.");
ABSL_FLAG(uint64_t, seed, 1, "run: seed of the random operands.");
ABSL_FLAG(std::string, mode, "inline",
          "run: how operands travel. inline: in every request. shm: copied "
          "once into a POSIX shared-memory segment registered as a region "
          "(the daemon must run on this host); requests name it and C is "
          "written there in place, so only the RPCs are timed. ipc: the same "
          "in cudaMalloc memory shared by CUDA IPC handle; vmm: in a "
          "cuMemCreate allocation shared as a file descriptor (both need a "
          "GPU here and a daemon on the CUDA backend). With a nonzero "
          "--beta, later iterations read the C the previous one wrote.");
ABSL_FLAG(bool, ring, false,
          "run: send the requests through a shared-memory request ring "
          "(AttachRing) instead of gRPC calls: for --mode shm, ipc or vmm "
          "and a daemon on this host; the latency then has no socket round "
          "trip in it.");
ABSL_FLAG(std::string, shm_prefix, "matmul",
          "run --mode=shm: the daemon's --shm_prefix; segment names start "
          "with it.");

namespace matmul::cli {

// absl::ParseCommandLine exits 1 on an unknown flag or a malformed value;
// this CLI promises 2 for every usage error, so check both first. Accepts
// --name=value, --name value, --bool_flag and --nobool_flag.
absl::Status CheckFlagSyntax(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || !absl::ConsumePrefix(&arg, "-")) continue;
    absl::ConsumePrefix(&arg, "-");
    const size_t equals = arg.find('=');
    const bool has_value = equals != absl::string_view::npos;
    absl::string_view name = arg.substr(0, equals);
    std::string value(has_value ? arg.substr(equals + 1) : "");

    // absl handles these before (and without) registering them as flags.
    if (name == "helpfull" || name == "helppackage" || name == "helpon" ||
        name == "helpmatch" || name == "version" || name == "only_check_args") {
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    bool negated = false;
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      negated = flag != nullptr;
      if (negated && !flag->IsOfType<bool>()) flag = nullptr;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (negated) {
      if (has_value) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " takes no value"));
      }
      continue;
    }
    if (!has_value) {
      if (flag->IsOfType<bool>()) continue;
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " needs a value"));
      }
      value = argv[++i];
    }
    // Flags that absl interprets itself (--flagfile, --help=substring...)
    // are left to it; for ours, parse the value now to catch mistakes. The
    // value set here is set again, identically, by ParseCommandLine.
    if (!absl::StrContains(flag->Filename(), "matmul_cli")) continue;
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad value \"", value, "\" for --", name, ": ", error));
    }
  }
  return absl::OkStatus();
}

std::string TargetForMode(const std::string& target, absl::string_view mode) {
  if (mode == "inline" || IsLocalTarget(target)) return target;
  std::string local = absl::GetFlag(FLAGS_local_target);
  std::cerr << "matmul-cli: --mode=" << mode
            << " uses regions, which stay on their host: using the daemon on "
               "this host, "
            << local << " (--local_target), not " << target << "\n";
  return local;
}

// The client options every subcommand shares: its timeout and TLS flags.
ClientOptions CliClientOptions(absl::Duration timeout) {
  ClientOptions options;
  options.default_timeout = timeout;
  options.tls = {.ca_file = absl::GetFlag(FLAGS_tls_ca),
                 .cert_file = absl::GetFlag(FLAGS_tls_cert),
                 .key_file = absl::GetFlag(FLAGS_tls_key),
                 .server_name = absl::GetFlag(FLAGS_tls_server_name)};
  return options;
}

}  // namespace matmul::cli
