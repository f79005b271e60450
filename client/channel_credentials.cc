#include "client/channel_credentials.h"

#include <grpcpp/support/channel_arguments.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace matmul {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path,
                                    absl::string_view what) {
  std::ifstream file(path);
  std::stringstream contents;
  contents << file.rdbuf();
  if (!file || contents.str().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the ", what, " PEM file '", path, "'"));
  }
  return contents.str();
}

}  // namespace

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
  absl::StatusOr<std::string> ca = ReadPem(tls.ca_file, "CA");
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *std::move(ca);
  if (!tls.cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(tls.cert_file, "certificate");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(tls.key_file, "private key");
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
