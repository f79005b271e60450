// matmul-server's flags, defined and read in one place: every setting of
// the daemon from its flag to the option struct of the room that uses it
// (the backends' BackendOptions, the server's ServerOptions). main.cc
// parses the command line, then asks for the settings.
#ifndef MATMUL_SERVER_DAEMON_FLAGS_H_
#define MATMUL_SERVER_DAEMON_FLAGS_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/backends/backend_options.h"
#include "server/matmul_server.h"

namespace matmul {

// This file's name, for HelpListsFlagsFrom: --help lists its flags.
inline constexpr char kDaemonFlagsFile[] = "server/daemon_flags.cc";

struct DaemonSettings {
  BackendOptions backend;
  ServerOptions server;  // on_device_lost is main's to set
  // On SIGTERM/SIGINT, how long requests in flight may take to finish.
  absl::Duration shutdown_grace;
};

// The settings the flags give, after absl::ParseCommandLine(argc, argv)
// (argv again for --listen, which may be repeated). INVALID_ARGUMENT names
// the flag whose value is wrong.
absl::StatusOr<DaemonSettings> SettingsFromFlags(int argc, char** argv);

}  // namespace matmul

#endif  // MATMUL_SERVER_DAEMON_FLAGS_H_
