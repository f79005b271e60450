// Binds a validated plan to the inline bytes of its request: the GemmProblem
// pointers address the request's own buffers (realigned copies only when the
// bytes are misaligned) and a fresh dense output buffer that becomes the
// response's C. BindInline copies the initial C (for beta != 0) into it.
#ifndef MATMUL_SERVER_INLINE_OPERANDS_H_
#define MATMUL_SERVER_INLINE_OPERANDS_H_

#include <string>
#include <vector>

#include "kernels/gemm_problem.h"
#include "matmul/v1/matmul.pb.h"
#include "server/request_validation.h"

namespace matmul {

class InlineOperands {
 public:
  // `request` must outlive the returned object.
  InlineOperands(const MatmulPlan& plan, const v1::MatmulRequest& request);

  InlineOperands(const InlineOperands&) = delete;
  InlineOperands& operator=(const InlineOperands&) = delete;

  const GemmProblem& problem() const { return problem_; }
  // Moves the result out; call once, after the product ran.
  std::string TakeOutput() { return std::move(output_); }

 private:
  const void* Aligned(const std::string& bytes, std::vector<uint32_t>* copy);

  GemmProblem problem_;
  std::string output_;
  std::vector<uint32_t> a_copy_;
  std::vector<uint32_t> b_copy_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_INLINE_OPERANDS_H_
