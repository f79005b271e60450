#include "kernels/cuda/testing/gpu_test_util.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/bf16.h"
#include "common/gemm/reference_gemm.h"
#include "common/status_macros.h"
#include "kernels/cuda/runtime/cuda_status.h"
#include "kernels/cuda/runtime/device_info.h"

namespace matmul::cuda::testing {
namespace {

struct Placement {
  Strides strides;
  int64_t span;  // elements from a matrix's first to one past its last
};

Placement Place(OperandLayout layout, int64_t rows, int64_t cols, int64_t pad) {
  switch (layout) {
    case OperandLayout::kRowMajor:
      return {{0, cols + pad, 1}, (rows - 1) * (cols + pad) + cols};
    case OperandLayout::kColMajor:
      return {{0, 1, rows + pad}, (cols - 1) * (rows + pad) + rows};
    case OperandLayout::kStrided:
    default:
      return {{0, 2 * cols + 1 + pad, 2},
              (rows - 1) * (2 * cols + 1 + pad) + (cols - 1) * 2 + 1};
  }
}

char Tag(OperandLayout layout) {
  switch (layout) {
    case OperandLayout::kRowMajor:
      return 'N';
    case OperandLayout::kColMajor:
      return 'T';
    default:
      return 'S';
  }
}

uint16_t RandomBf16(std::mt19937_64& rng) {
  std::uniform_real_distribution<float> magnitude(0.25f, 1.0f);
  const float value = magnitude(rng);
  return FloatToBf16((rng() & 1) ? value : -value);
}

// Element offsets of every matrix element of an operand, per entry.
template <typename F>
void ForEachElement(const Strides& s, int64_t entries, int64_t batch_stride,
                    int64_t rows, int64_t cols, F f) {
  for (int64_t b = 0; b < entries; ++b) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        f(b * batch_stride + i * s.row + j * s.col);
      }
    }
  }
}

}  // namespace

std::string NoGpuReason() {
  if (cuda::CudaDeviceCount() == 0) {
    return "no CUDA device or driver on this machine; GPU test not run";
  }
  return "";
}

std::string ProblemSpec::Name() const {
  return absl::StrCat(batch, "x", m, "x", n, "x", k, ":",
                      std::string(1, Tag(a)), std::string(1, Tag(b)), "C",
                      std::string(1, Tag(c)), ":", DTypeName(c_dtype), ":alpha",
                      alpha, ":beta", beta, broadcast_a ? ":bcastA" : "",
                      broadcast_b ? ":bcastB" : "",
                      pointer_arrays ? ":ptrs" : "", ":pad", pad);
}

HostProblem MakeHostProblem(const ProblemSpec& spec, std::mt19937_64& rng) {
  HostProblem host;
  host.spec = spec;
  const Placement pa = Place(spec.a, spec.m, spec.k, spec.pad);
  const Placement pb = Place(spec.b, spec.k, spec.n, spec.pad);
  const Placement pc = Place(spec.c, spec.m, spec.n, spec.pad);
  // Odd gaps between entries exercise unaligned batch strides.
  const int64_t gap = spec.pad > 0 ? 3 : 0;
  const bool ptrs = spec.pointer_arrays;
  const bool bcast_a = spec.broadcast_a && !ptrs && spec.batch > 1;
  const bool bcast_b = spec.broadcast_b && !ptrs && spec.batch > 1;
  const int64_t a_entries = bcast_a ? 1 : spec.batch;
  const int64_t b_entries = bcast_b ? 1 : spec.batch;
  const int64_t a_bs = pa.span + gap, b_bs = pb.span + gap,
                c_bs = pc.span + gap;
  const size_t c_elem = DTypeSize(spec.c_dtype);

  host.a.assign(a_entries * a_bs, 0xffff);
  host.b.assign(b_entries * b_bs, 0xffff);
  host.c.assign(spec.batch * c_bs * c_elem, 0xff);  // NaN in both dtypes
  ForEachElement(pa.strides, a_entries, a_bs, spec.m, spec.k,
                 [&](int64_t i) { host.a[i] = RandomBf16(rng); });
  ForEachElement(pb.strides, b_entries, b_bs, spec.k, spec.n,
                 [&](int64_t i) { host.b[i] = RandomBf16(rng); });
  if (spec.beta != 0.0f) {
    ForEachElement(pc.strides, spec.batch, c_bs, spec.m, spec.n,
                   [&](int64_t i) {
                     const uint16_t bits = RandomBf16(rng);
                     if (spec.c_dtype == DType::kBF16) {
                       std::memcpy(&host.c[i * 2], &bits, 2);
                     } else {
                       const float value = Bf16ToFloat(bits);
                       std::memcpy(&host.c[i * 4], &value, 4);
                     }
                   });
  }
  host.c_initial = host.c;

  GemmProblem& p = host.problem;
  p.batch = spec.batch;
  p.m = spec.m;
  p.n = spec.n;
  p.k = spec.k;
  p.c_dtype = spec.c_dtype;
  p.alpha = spec.alpha;
  p.beta = spec.beta;
  p.a.strides = pa.strides;
  p.b.strides = pb.strides;
  p.c.strides = pc.strides;
  if (ptrs) {
    // Entries in reverse storage order, so that a kernel that ignores the
    // array and assumes a stride gets it wrong.
    for (int64_t b = 0; b < spec.batch; ++b) {
      const int64_t r = spec.batch - 1 - b;
      host.a_ptrs.push_back(host.a.data() + r * a_bs);
      host.b_ptrs.push_back(host.b.data() + r * b_bs);
      host.c_ptrs.push_back(host.c.data() + r * c_bs * c_elem);
    }
    p.a.pointers = host.a_ptrs.data();
    p.b.pointers = host.b_ptrs.data();
    p.c.pointers = host.c_ptrs.data();
    // Ignored with pointer arrays; non-zero so nothing mistakes it for a
    // broadcast.
    p.a.strides.batch = a_bs;
    p.b.strides.batch = b_bs;
    p.c.strides.batch = c_bs;
  } else {
    p.a.strides.batch = bcast_a ? 0 : a_bs;
    p.b.strides.batch = bcast_b ? 0 : b_bs;
    p.c.strides.batch = c_bs;
  }
  p.a.data = host.a.data();
  p.b.data = host.b.data();
  p.c.data = host.c.data();
  return host;
}

ProblemSpec RandomSpec(std::mt19937_64& rng, int64_t max_dim,
                       bool allow_strided, bool allow_pointer_arrays) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  auto dim = [&] {
    // A third multiples of 16 (fast paths), the rest any size (tails).
    const int64_t d = uniform(1, max_dim);
    return uniform(0, 2) == 0 ? std::max<int64_t>(16, d / 16 * 16) : d;
  };
  const OperandLayout layouts[] = {OperandLayout::kRowMajor,
                                   OperandLayout::kColMajor,
                                   OperandLayout::kStrided};
  ProblemSpec s;
  s.batch = uniform(0, 9) < 7 ? 1 : uniform(2, 4);
  s.m = dim();
  s.n = dim();
  s.k = dim();
  const int layout_count = allow_strided ? 3 : 2;
  auto layout = [&] {
    // Strided operands are rare in practice; one draw in six.
    if (allow_strided && uniform(0, 5) == 0) return layouts[2];
    return layouts[uniform(0, 1)];
  };
  (void)layout_count;
  s.a = layout();
  s.b = layout();
  s.c = uniform(0, 4) == 0 ? layout() : OperandLayout::kRowMajor;
  s.c_dtype = uniform(0, 1) ? DType::kBF16 : DType::kFP32;
  const float alphas[] = {1.0f, 0.5f, -1.25f};
  const float betas[] = {0.0f, 0.0f, 0.0f, 1.0f, -0.5f};
  s.alpha = alphas[uniform(0, 2)];
  s.beta = betas[uniform(0, 4)];
  if (s.batch > 1) {
    s.broadcast_a = uniform(0, 3) == 0;
    s.broadcast_b = !s.broadcast_a && uniform(0, 3) == 0;
  }
  s.pointer_arrays = allow_pointer_arrays && uniform(0, 6) == 0;
  if (s.pointer_arrays) s.broadcast_a = s.broadcast_b = false;
  s.pad = uniform(0, 1) ? 0 : uniform(1, 9);
  return s;
}

double CheckError(const HostProblem& host) {
  // The reference reads C as it was before the run.
  HostProblem before = host;
  before.c = host.c_initial;
  before.problem.c.data = before.c.data();
  const size_t c_elem = DTypeSize(host.spec.c_dtype);
  if (host.problem.c.pointers != nullptr) {
    for (size_t b = 0; b < before.c_ptrs.size(); ++b) {
      const auto offset =
          static_cast<const uint8_t*>(host.c_ptrs[b]) - host.c.data();
      before.c_ptrs[b] = before.c.data() + offset;
    }
    before.problem.c.pointers = before.c_ptrs.data();
  }
  (void)c_elem;
  // Re-point A and B at the copy's own storage as well.
  before.problem.a.data = before.a.data();
  before.problem.b.data = before.b.data();
  if (host.problem.a.pointers != nullptr) {
    for (size_t b = 0; b < before.a_ptrs.size(); ++b) {
      before.a_ptrs[b] =
          before.a.data() +
          (static_cast<const uint16_t*>(host.a_ptrs[b]) - host.a.data());
      before.b_ptrs[b] =
          before.b.data() +
          (static_cast<const uint16_t*>(host.b_ptrs[b]) - host.b.data());
    }
    before.problem.a.pointers = before.a_ptrs.data();
    before.problem.b.pointers = before.b_ptrs.data();
  }
  const std::vector<double> expected = ReferenceGemm(before.problem);
  const std::vector<double> actual = ReadOutput(host.problem);
  return RelativeError(actual, expected);
}

bool OutsideWritten(const HostProblem& host) {
  const size_t c_elem = DTypeSize(host.spec.c_dtype);
  const int64_t elements = static_cast<int64_t>(host.c.size() / c_elem);
  std::vector<bool> inside(elements, false);
  const GemmProblem& p = host.problem;
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t base;
    if (p.c.pointers != nullptr) {
      base = (static_cast<const uint8_t*>(p.c.pointers[b]) - host.c.data()) /
             static_cast<int64_t>(c_elem);
    } else {
      base = b * p.c.strides.batch;
    }
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        inside[base + i * p.c.strides.row + j * p.c.strides.col] = true;
      }
    }
  }
  for (int64_t e = 0; e < elements; ++e) {
    if (inside[e]) continue;
    if (std::memcmp(&host.c[e * c_elem], &host.c_initial[e * c_elem], c_elem) !=
        0) {
      return true;
    }
  }
  return false;
}

absl::StatusOr<DeviceProblem> Upload(const HostProblem& host) {
  DeviceProblem d;
  const size_t a_bytes = host.a.size() * 2, b_bytes = host.b.size() * 2;
  ASSIGN_OR_RETURN(d.a, cuda::DeviceBuffer::Create(a_bytes));
  ASSIGN_OR_RETURN(d.b, cuda::DeviceBuffer::Create(b_bytes));
  ASSIGN_OR_RETURN(d.c, cuda::DeviceBuffer::Create(host.c.size()));
  RETURN_IF_ERROR(cuda::CudaStatus(
      cudaMemcpy(d.a.data(), host.a.data(), a_bytes, cudaMemcpyHostToDevice),
      "cudaMemcpy"));
  RETURN_IF_ERROR(cuda::CudaStatus(
      cudaMemcpy(d.b.data(), host.b.data(), b_bytes, cudaMemcpyHostToDevice),
      "cudaMemcpy"));
  RETURN_IF_ERROR(
      cuda::CudaStatus(cudaMemcpy(d.c.data(), host.c.data(), host.c.size(),
                                  cudaMemcpyHostToDevice),
                       "cudaMemcpy"));
  d.problem = host.problem;
  d.problem.a.data = d.a.data();
  d.problem.b.data = d.b.data();
  d.problem.c.data = d.c.data();
  if (host.problem.a.pointers != nullptr) {
    const size_t count = host.a_ptrs.size();
    std::vector<const void*> a(count), b(count);
    std::vector<void*> c(count);
    for (size_t i = 0; i < count; ++i) {
      a[i] = static_cast<char*>(d.a.data()) +
             (reinterpret_cast<const char*>(host.a_ptrs[i]) -
              reinterpret_cast<const char*>(host.a.data()));
      b[i] = static_cast<char*>(d.b.data()) +
             (reinterpret_cast<const char*>(host.b_ptrs[i]) -
              reinterpret_cast<const char*>(host.b.data()));
      c[i] = static_cast<char*>(d.c.data()) +
             (static_cast<const uint8_t*>(host.c_ptrs[i]) - host.c.data());
    }
    const size_t bytes = count * sizeof(void*);
    ASSIGN_OR_RETURN(d.a_ptrs, cuda::DeviceBuffer::Create(bytes));
    ASSIGN_OR_RETURN(d.b_ptrs, cuda::DeviceBuffer::Create(bytes));
    ASSIGN_OR_RETURN(d.c_ptrs, cuda::DeviceBuffer::Create(bytes));
    RETURN_IF_ERROR(cuda::CudaStatus(
        cudaMemcpy(d.a_ptrs.data(), a.data(), bytes, cudaMemcpyHostToDevice),
        "cudaMemcpy"));
    RETURN_IF_ERROR(cuda::CudaStatus(
        cudaMemcpy(d.b_ptrs.data(), b.data(), bytes, cudaMemcpyHostToDevice),
        "cudaMemcpy"));
    RETURN_IF_ERROR(cuda::CudaStatus(
        cudaMemcpy(d.c_ptrs.data(), c.data(), bytes, cudaMemcpyHostToDevice),
        "cudaMemcpy"));
    d.problem.a.pointers = static_cast<const void* const*>(d.a_ptrs.data());
    d.problem.b.pointers = static_cast<const void* const*>(d.b_ptrs.data());
    d.problem.c.pointers = static_cast<void* const*>(d.c_ptrs.data());
  }
  // cudaMemcpy from pageable memory may return before its DMA lands, and the
  // backend's streams are non-blocking: they would not wait for it.
  RETURN_IF_ERROR(cuda::CudaStatus(cudaStreamSynchronize(nullptr),
                                   "cudaStreamSynchronize"));
  return d;
}

absl::Status Download(const DeviceProblem& device, HostProblem& host) {
  return cuda::CudaStatus(cudaMemcpy(host.c.data(), device.c.data(),
                                     host.c.size(), cudaMemcpyDeviceToHost),
                          "cudaMemcpy");
}

}  // namespace matmul::cuda::testing
