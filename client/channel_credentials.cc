#include "client/channel_credentials.h"

#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/str_cat.h"
#include "common/pem_file.h"

namespace matmul {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const ClientTlsOptions& tls) {
  if (!tls.enabled()) {
    if (!tls.cert_file.empty() || !tls.key_file.empty()) {
      return absl::InvalidArgumentError(
          "a client certificate needs the CA file that signed the daemon's "
          "certificate as well (TLS)");
    }
    return grpc::InsecureChannelCredentials();
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate and its key go together: give both or neither");
  }
  grpc::SslCredentialsOptions ssl;
  absl::StatusOr<std::string> ca = ReadPemFile(tls.ca_file, "the TLS CA");
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *std::move(ca);
  if (!tls.cert_file.empty()) {
    absl::StatusOr<std::string> cert =
        ReadPemFile(tls.cert_file, "the client certificate");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key =
        ReadPemFile(tls.key_file, "the client key");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

void ApplyServerName(const ClientTlsOptions& tls,
                     grpc::ChannelArguments& arguments) {
  if (tls.enabled() && !tls.server_name.empty()) {
    arguments.SetSslTargetNameOverride(tls.server_name);
  }
}

}  // namespace matmul
