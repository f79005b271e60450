// What a transport hands a request to. The gRPC stream reactor and the
// request ring's poller take requests off their transport and submit each
// one here; ProductAdmission implements it. The reactors depend on this
// interface rather than on the service, so the service can own and create
// them without an include cycle.
#ifndef MATMUL_SERVER_PRODUCT_PRODUCT_SUBMITTER_H_
#define MATMUL_SERVER_PRODUCT_PRODUCT_SUBMITTER_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "matmul/v1/matmul.pb.h"
#include "server/transport/peer_credentials.h"

namespace matmul {

// What the transport of a request says about its caller.
struct CallControl {
  // The request is dropped with DEADLINE_EXCEEDED if it has not run by then.
  absl::Time deadline = absl::InfiniteFuture();
  // True once the caller stopped waiting (the call was cancelled, the
  // client went away): the request is dropped before it runs. May be empty.
  std::function<bool()> cancelled;
  // The calling process, as the kernel names it; absent over TCP, where
  // region operands are refused.
  std::optional<PeerCredentials> caller;
  // Whose share of the in-flight quota the request takes (ClientKey).
  std::string client_key;
  // The transport's thread may run a small product itself when a worker
  // would have run it alone at once (Executor::TryRunHere): set by unary
  // calls on gRPC's synchronous API, whose thread serves that call alone
  // and waits for its answer anyway; left off where the thread serves
  // other calls or feeds further requests (the callback API unless told
  // otherwise, streams, rings), which a product holding it would stall.
  bool may_run_on_caller = false;
  // Which transport brought the request and from where ("unary call from
  // unix:...", "ring slot 3 of session ..."): what /debug/requests shows.
  std::string origin;
};

class ProductSubmitter {
 public:
  virtual ~ProductSubmitter() = default;

  // Validates `request` and queues its product; `done` runs exactly once,
  // on a worker thread or (for rejections) before Submit returns, with the
  // request's final status. `request` and `response` must outlive `done`.
  virtual void Submit(CallControl control, const v1::MatmulRequest* request,
                      v1::MatmulResponse* response,
                      absl::AnyInvocable<void(absl::Status) &&> done) = 0;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_PRODUCT_PRODUCT_SUBMITTER_H_
