// matmul::Client: a thin, RAII wrapper over the matmul.v1.MatmulService stub
// that speaks absl::Status instead of grpc::Status.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<matmul::Client> client,
//                    matmul::Client::Create("unix:/run/matmul/matmul.sock"));
//   ASSIGN_OR_RETURN(matmul::v1::MatmulResponse response,
//                    client->Matmul(request, absl::Seconds(10)));
//
// Every call carries a deadline (the per-call timeout, or the default from
// ClientOptions), so a wedged daemon can never hang a client forever. gRPC
// status codes map one to one onto absl::StatusCode; the server's message is
// kept verbatim, so the "what was wrong and what was expected" text from the
// daemon reaches the caller unchanged.
#ifndef MATMUL_CLIENT_CLIENT_H_
#define MATMUL_CLIENT_CLIENT_H_

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/channel_credentials.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"
#include "matmul/v1/matmul.grpc.pb.h"
#include "matmul/v1/matmul.pb.h"

namespace matmul {

struct ClientOptions {
  // Largest message the channel sends or receives. Inline operands travel in
  // the request and the product in the response, so this bounds the largest
  // problem a client can send without regions. Matches the daemon's default.
  int64_t max_message_bytes = int64_t{256} << 20;
  // Deadline of calls that do not pass their own timeout.
  absl::Duration default_timeout = absl::Seconds(60);
  // When true, calls wait (up to their deadline) for the channel to become
  // ready instead of failing fast with UNAVAILABLE while the daemon is still
  // starting. Tests that start a daemon and connect at once want this.
  bool wait_for_ready = false;
  // TLS for a TCP daemon that serves it (see channel_credentials.h).
  ClientTlsOptions tls;
};

// True for a target that names one daemon on this host: a unix socket, the
// only transport that carries regions, sessions and rings. Any other target
// may name several daemons (a DNS name with several addresses, as a
// Kubernetes headless Service gives, or an "ipv4:a:p,b:p" list): Client
// spreads its calls over all of them with gRPC's round_robin policy.
bool IsLocalTarget(absl::string_view target);

// Maps a gRPC status onto the absl::Status with the same code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

// DEADLINE_EXCEEDED for a call whose timeout is zero or negative: it is
// never sent (gRPC and the request ring alike).
absl::Status TimeoutPassedBeforeSending();

// Turns a MatmulStream response's in-band status (status_code,
// status_message) into an absl::Status: OK when status_code is 0.
absl::Status ResponseStatus(const v1::MatmulResponse& response);

// Thread-safe: one Client (one channel, multiplexing HTTP/2 streams) may be
// shared by any number of threads and outstanding calls.
class Client {
 public:
  using MatmulCallback =
      absl::AnyInvocable<void(absl::StatusOr<v1::MatmulResponse>) &&>;

  // Opens a channel to `target`: "unix:/path/to.sock", "unix:///abs/path",
  // "host:port", "dns:///host:port" or "ipv4:a:port,b:port" (plaintext
  // unless options.tls; see IsLocalTarget for several daemons). The channel
  // connects lazily; the first call (or WaitForConnected) establishes it. Fails
  // on an empty target or non-positive options.
  static absl::StatusOr<std::unique_ptr<Client>> Create(
      std::string target, ClientOptions options = {});

  // Blocks until every MatmulAsync callback has run, so callbacks may safely
  // reference the client and whatever owns it. A callback must therefore
  // not destroy the client itself.
  ~Client();

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Waits up to `timeout` for the channel to reach READY; UNAVAILABLE when
  // it does not (no daemon listening, wrong path).
  absl::Status WaitForConnected(absl::Duration timeout);

  // One product, synchronously.
  absl::StatusOr<v1::MatmulResponse> Matmul(const v1::MatmulRequest& request,
                                            absl::Duration timeout);
  absl::StatusOr<v1::MatmulResponse> Matmul(const v1::MatmulRequest& request);

  // One product through the gRPC callback API: returns at once; `done` runs
  // exactly once, on a gRPC thread, with the response or the error. The
  // request is moved into the call (no copy of the operand bytes).
  void MatmulAsync(v1::MatmulRequest request, absl::Duration timeout,
                   MatmulCallback done);
  // As MatmulAsync, as a future.
  std::future<absl::StatusOr<v1::MatmulResponse>> MatmulFuture(
      v1::MatmulRequest request, absl::Duration timeout);

  // Sends every request over one MatmulStream and collects the responses in
  // the order they arrive (match them by request_id). A request the server
  // rejects comes back as a response with status_code set (see
  // ResponseStatus); the call itself fails only when the stream does, or
  // when the number of responses is not the number of requests. `timeout`
  // bounds the whole stream.
  absl::StatusOr<std::vector<v1::MatmulResponse>> MatmulStream(
      absl::Span<const v1::MatmulRequest> requests, absl::Duration timeout);

  absl::StatusOr<v1::GetServerInfoResponse> GetServerInfo(
      absl::Duration timeout);
  absl::StatusOr<v1::GetServerInfoResponse> GetServerInfo();

  // Region RPCs (see matmul.proto). Most callers want the RAII wrappers in
  // client/session.h and client/regions/registered_region.h instead.
  absl::StatusOr<v1::RegisterRegionResponse> RegisterRegion(
      const v1::RegisterRegionRequest& request, absl::Duration timeout);
  absl::StatusOr<v1::UnregisterRegionResponse> UnregisterRegion(
      const v1::UnregisterRegionRequest& request, absl::Duration timeout);
  absl::StatusOr<v1::ListRegionsResponse> ListRegions(
      const std::string& session_id, absl::Duration timeout);
  absl::StatusOr<v1::ShareRegionResponse> ShareRegion(
      const v1::ShareRegionRequest& request, absl::Duration timeout);

  // The stub, for calls this class does not wrap (Session's OpenSession
  // stream, which lives as long as its owner rather than one call).
  v1::MatmulService::Stub& stub() { return *stub_; }

  const std::string& target() const { return target_; }
  const ClientOptions& options() const { return options_; }

 private:
  Client(std::string target, ClientOptions options,
         std::shared_ptr<grpc::Channel> channel);

  // Sets the deadline and wait-for-ready flag every call shares.
  void PrepareContext(grpc::ClientContext& context,
                      absl::Duration timeout) const;

  // Called once per MatmulAsync after its callback ran.
  void FinishAsyncCall();

  const std::string target_;
  const ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::MatmulService::Stub> stub_;

  absl::Mutex mu_;
  int64_t async_calls_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace matmul

#endif  // MATMUL_CLIENT_CLIENT_H_
