// One accepted, validated and bound request on its way through the batcher
// to a worker: everything the worker needs to run it and answer it.
#ifndef MATMUL_SERVER_PRODUCT_PENDING_PRODUCT_H_
#define MATMUL_SERVER_PRODUCT_PENDING_PRODUCT_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "matmul/v1/matmul.pb.h"
#include "server/product/bound_list.h"
#include "server/product/bound_operands.h"
#include "server/product/in_flight_requests.h"
#include "server/product/product_submitter.h"
#include "server/product/request_validation.h"

namespace matmul {

struct PendingProduct {
  // One product: its plan and operands. A product list (MatmulRequest.
  // products) has `list` instead, and no operands.
  MatmulPlan plan;
  std::unique_ptr<BoundOperands> operands;
  std::unique_ptr<BoundList> list;
  const v1::MatmulRequest* request = nullptr;  // owned by the call
  v1::MatmulResponse* response = nullptr;      // owned by the call
  CallControl control;
  absl::Time accepted;  // when the server took the request
  // Answers the call; run exactly once, with the final status.
  absl::AnyInvocable<void(absl::Status) &&> finish;
  // The request in the daemon's table of those in flight (null in tests
  // that make products by hand): its stage, and the claim a worker takes
  // before writing the response (a drain may have answered it already).
  std::shared_ptr<InFlightRequest> in_flight;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_PRODUCT_PENDING_PRODUCT_H_
