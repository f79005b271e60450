// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status and absl::StatusOr.
// abseil 20220623 ships no such macros; this is the project's one copy.
#ifndef MATMUL_COMMON_STATUS_MACROS_H_
#define MATMUL_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MATMUL_CONCAT_INNER_(a, b) a##b
#define MATMUL_CONCAT_(a, b) MATMUL_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the enclosing
// function when it is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status matmul_status_ = (expr);          \
    if (!matmul_status_.ok()) return matmul_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` evaluates an absl::StatusOr, returns
// its status on error and otherwise moves the value into `lhs`.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(MATMUL_CONCAT_(matmul_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                           \
  if (!statusor.ok()) return statusor.status();     \
  lhs = std::move(statusor).value()

#endif  // MATMUL_COMMON_STATUS_MACROS_H_
