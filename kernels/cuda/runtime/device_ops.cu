#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/runtime/cuda_status.h"
#include "kernels/cuda/runtime/device_ops.h"

namespace matmul::cuda {
namespace {

// Threads along x walk one row's columns, rows (of all entries) along y:
// one division per row instead of three 64-bit divisions per element, and
// consecutive threads touch consecutive addresses on a side whose columns
// are contiguous.
template <typename T>
__global__ void CopyMatrixKernel(StridedView src, MutableStridedView dst,
                                 int64_t batch, int64_t rows, int64_t cols) {
  const int64_t all_rows = batch * rows;
  for (int64_t r = blockIdx.y * int64_t{blockDim.y} + threadIdx.y; r < all_rows;
       r += int64_t{gridDim.y} * blockDim.y) {
    const int64_t b = r / rows;
    const int64_t i = r - b * rows;
    const T* s =
        (src.pointers != nullptr
             ? static_cast<const T*>(src.pointers[b])
             : static_cast<const T*>(src.data) + b * src.strides.batch) +
        i * src.strides.row;
    T* d = (dst.pointers != nullptr
                ? static_cast<T*>(dst.pointers[b])
                : static_cast<T*>(dst.data) + b * dst.strides.batch) +
           i * dst.strides.row;
    for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < cols;
         j += int64_t{gridDim.x} * blockDim.x) {
      d[j * dst.strides.col] = s[j * src.strides.col];
    }
  }
}

__device__ uint64_t Mix(uint64_t x) {
  // splitmix64's finaliser: cheap and well spread.
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void FillRandomKernel(__nv_bfloat16* data, int64_t count,
                                 uint64_t seed) {
  for (int64_t index = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
       index < count; index += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t bits = Mix(seed ^ Mix(static_cast<uint64_t>(index)));
    const float magnitude = 0.25f + 0.75f * (bits >> 40) * (1.0f / 16777216.0f);
    data[index] = __float2bfloat16(bits & 1 ? magnitude : -magnitude);
  }
}

// Writes to `address`, which the caller picks outside every mapping (past
// the user address space of x86-64 and of arm64 with 48-bit addresses, so
// that not even a host page reached through HMM can be hit).
__global__ void OutOfRangeWriteKernel(uint64_t address) {
  *reinterpret_cast<volatile uint32_t*>(address) = 0xdeadbeefu;
}

// True when both sides' rows are contiguous and every row of every entry
// starts on a 16-byte boundary and spans whole 16-byte words.
template <typename View>
bool RowsAreVectors(const View& view, int64_t cols, int element_bytes) {
  const auto aligned = [](int64_t bytes) { return bytes % 16 == 0; };
  if (view.strides.col != 1 || !aligned(cols * element_bytes) ||
      !aligned(view.strides.row * element_bytes)) {
    return false;
  }
  if (view.pointers != nullptr) return view.pointer_alignment >= 16;
  return aligned(reinterpret_cast<uintptr_t>(view.data)) &&
         aligned(view.strides.batch * element_bytes);
}

// The same view counted in 16-byte words instead of elements.
template <typename View>
View InWords(View view, int element_bytes) {
  const int64_t per_word = 16 / element_bytes;
  view.strides.batch /= per_word;
  view.strides.row /= per_word;
  return view;
}

int GridFor(int64_t total, int threads) {
  const int64_t blocks = (total + threads - 1) / threads;
  return static_cast<int>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

template <typename T>
void LaunchCopy(const StridedView& src, const MutableStridedView& dst,
                int64_t batch, int64_t rows, int64_t cols,
                cudaStream_t stream) {
  // 256 threads a block: as many along a row as it has columns (a warp at
  // least), the rest over rows.
  int x = 32;
  while (x < 256 && x < cols) x *= 2;
  const dim3 threads(x, 256 / x);
  const dim3 blocks(std::min(GridFor(cols, threads.x), 65535),
                    std::min(GridFor(batch * rows, threads.y), 65535));
  CopyMatrixKernel<T>
      <<<blocks, threads, 0, stream>>>(src, dst, batch, rows, cols);
}

}  // namespace

absl::Status CopyMatrix(const StridedView& src, const MutableStridedView& dst,
                        int64_t batch, int64_t rows, int64_t cols,
                        int element_bytes, cudaStream_t stream) {
  const int64_t total = batch * rows * cols;
  if (total == 0) return absl::OkStatus();
  if ((element_bytes == 2 || element_bytes == 4) &&
      RowsAreVectors(src, cols, element_bytes) &&
      RowsAreVectors(dst, cols, element_bytes)) {
    LaunchCopy<uint4>(InWords(src, element_bytes), InWords(dst, element_bytes),
                      batch, rows, cols * element_bytes / 16, stream);
  } else if (element_bytes == 2) {
    LaunchCopy<uint16_t>(src, dst, batch, rows, cols, stream);
  } else if (element_bytes == 4) {
    LaunchCopy<uint32_t>(src, dst, batch, rows, cols, stream);
  } else {
    return absl::InvalidArgumentError(
        "CopyMatrix: element size must be 2 or 4");
  }
  return LastLaunchStatus("CopyMatrix launch");
}

absl::Status FillRandomBf16(void* data, int64_t count, uint64_t seed,
                            cudaStream_t stream) {
  if (count == 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  FillRandomKernel<<<GridFor(count, kThreads), kThreads, 0, stream>>>(
      static_cast<__nv_bfloat16*>(data), count, seed);
  return LastLaunchStatus("FillRandomBf16 launch");
}

absl::Status LaunchOutOfRangeWrite(cudaStream_t stream) {
  OutOfRangeWriteKernel<<<1, 1, 0, stream>>>(uint64_t{1} << 48);
  return LastLaunchStatus("OutOfRangeWrite launch");
}

}  // namespace matmul::cuda
