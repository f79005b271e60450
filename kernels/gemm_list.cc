#include "kernels/gemm_list.h"

#include "absl/strings/str_cat.h"

namespace matmul {

std::vector<GemmProblem> WithScratch(const GemmList& list, void* scratch) {
  std::vector<GemmProblem> products = list.products;
  char* base = static_cast<char*>(scratch);
  for (const ScratchOperand& use : list.scratch) {
    GemmProblem& p = products[use.product];
    char* address = base + use.offset_bytes;
    switch (use.operand) {
      case ScratchOperand::Which::kA:
        p.a.data = address;
        break;
      case ScratchOperand::Which::kB:
        p.b.data = address;
        break;
      case ScratchOperand::Which::kC:
        p.c.data = address;
        break;
    }
  }
  return products;
}

absl::Status InProduct(size_t product, const absl::Status& status) {
  return absl::Status(
      status.code(), absl::StrCat("product ", product, ": ", status.message()));
}

std::vector<double> ShareByFlops(const std::vector<GemmProblem>& products,
                                 double seconds) {
  double total = 0.0;
  for (const GemmProblem& p : products) total += p.flops();
  std::vector<double> shares;
  shares.reserve(products.size());
  for (const GemmProblem& p : products) {
    shares.push_back(total > 0 ? seconds * p.flops() / total : 0.0);
  }
  return shares;
}

}  // namespace matmul
