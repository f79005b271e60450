// The credentials a client channel uses: plaintext for the daemon's unix
// socket (the kernel vouches for both ends), TLS for a TCP daemon that
// serves it, with a client certificate where the daemon asks for one.
#ifndef MATMUL_CLIENT_CHANNEL_CREDENTIALS_H_
#define MATMUL_CLIENT_CHANNEL_CREDENTIALS_H_

#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace matmul {

// PEM files. TLS is on when ca_file is set.
struct ClientTlsOptions {
  std::string ca_file;    // the CA that signed the daemon's certificate
  std::string cert_file;  // this client's certificate, for mutual TLS
  std::string key_file;   // its private key
  // The name checked against the daemon's certificate, when it differs
  // from the target's host (e.g. connecting to an IP address).
  std::string server_name;
  bool enabled() const { return !ca_file.empty(); }
};

// INVALID_ARGUMENT for unreadable files or a certificate without its key.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const ClientTlsOptions& tls);

// The channel argument that goes with `tls.server_name`, if any.
void ApplyServerName(const ClientTlsOptions& tls,
                     grpc::ChannelArguments& arguments);

}  // namespace matmul

#endif  // MATMUL_CLIENT_CHANNEL_CREDENTIALS_H_
