// The CallControl of a gRPC call: its deadline, its cancellation and its
// caller (the local process behind a unix-socket call, else the peer
// string as the quota's key).
#ifndef MATMUL_SERVER_API_GRPC_CALL_CONTROL_H_
#define MATMUL_SERVER_API_GRPC_CALL_CONTROL_H_

#include <grpcpp/grpcpp.h>

#include "absl/time/time.h"
#include "server/product/product_submitter.h"

namespace matmul {

// How much later than the client's a call's deadline can look on the
// server (see GrpcCallControl).
inline constexpr absl::Duration kGrpcDeadlineSlack = absl::Milliseconds(2);

// The deadline, cancellation and caller of a gRPC call; the deadline is
// the client's at the latest (see kGrpcDeadlineSlack).
// `context` of either API (callback or synchronous).
CallControl GrpcCallControl(grpc::ServerContextBase* context);

}  // namespace matmul

#endif  // MATMUL_SERVER_API_GRPC_CALL_CONTROL_H_
