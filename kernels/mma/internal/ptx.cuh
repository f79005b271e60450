// Inline-PTX wrappers for the instructions the kernels are built from:
// cp.async (global->shared copies with zero fill), shared stores, ldmatrix,
// the m16n8k16 BF16 mma.sync, and, for the TMA kernel, mbarriers and the
// copy engine's 2-D tensor loads. One instruction per function, so that the
// loaders and main loops read as the algorithm and the PTX stays in one
// place.
#ifndef MATMUL_KERNELS_MMA_INTERNAL_PTX_CUH_
#define MATMUL_KERNELS_MMA_INTERNAL_PTX_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace matmul::mma::internal {

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy; bytes beyond src_bytes (0..16) are zeroed,
// which is how tails along every dimension become zeros for the MMA.
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src,
                                          int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void CpAsync16Full(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst),
               "l"(src));
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}
__device__ __forceinline__ void StoreShared16(uint32_t dst, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}

__device__ __forceinline__ void StoreShared2(uint32_t dst, unsigned short v) {
  asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(dst), "h"(v));
}

template <bool kTrans>
__device__ __forceinline__ void Ldmatrix4(uint32_t (&r)[4], uint32_t addr) {
  if constexpr (kTrans) {
    asm volatile(
        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
        : "r"(addr));
  } else {
    asm volatile(
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
        : "r"(addr));
  }
}

// The same, returning registers 0-1 and 2-3 as two pairs.
template <bool kTrans>
__device__ __forceinline__ void Ldmatrix4x2(uint32_t (&lo)[2],
                                            uint32_t (&hi)[2], uint32_t addr) {
  if constexpr (kTrans) {
    asm volatile(
        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
        : "=r"(lo[0]), "=r"(lo[1]), "=r"(hi[0]), "=r"(hi[1])
        : "r"(addr));
  } else {
    asm volatile(
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
        : "=r"(lo[0]), "=r"(lo[1]), "=r"(hi[0]), "=r"(hi[1])
        : "r"(addr));
  }
}

__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4],
                                        const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Copy engine (TMA) and mbarriers, sm_90 and later (the GB10 has both).
// Callers compile them only for __CUDA_ARCH__ >= 900.
__device__ __forceinline__ void MbarInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar),
               "r"(count)
               : "memory");
}
// Makes the initialised barriers visible to the copy engine.
__device__ __forceinline__ void FenceMbarInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also announces `bytes` of copies completing on `bar`.
__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar,
                                                   uint32_t bytes) {
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
      "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void MbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar)
               : "memory");
}
// Spins until the barrier's phase of parity `parity` has completed.
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// One box of a 2-D tensor map at element coordinates (c0 innermost, c1)
// into shared memory at dst; completes on `bar`. Out-of-range elements
// arrive as zeros.
__device__ __forceinline__ void TmaLoad2d(uint32_t dst, const void* map, int c0,
                                          int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::"
      "complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

}  // namespace matmul::mma::internal

#endif  // MATMUL_KERNELS_MMA_INTERNAL_PTX_CUH_
