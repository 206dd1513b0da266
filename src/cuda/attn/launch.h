// launch.h — launchers of each kernel family (one TU per family so the 2-core build compiles
// them in parallel): grid math, the shared-memory opt-in and the dtype × head-dim dispatch.
// Called by launch.cu, which runs the pre-passes (bias tile map, δ) and checks launch errors.
#pragma once

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#else
#include "emu/cuda_runtime_host.h"  // the CPU emulation (src/emu): launch_kernel runs the kernel there
#endif

#include "cuda/attn/attn_kernels.h"
#include "cuda/attn/common.cuh"

namespace fattn::cuda::attn {

// All return the cudaError_t of the launch (cudaSuccess when nothing had to run).
cudaError_t native_fwd(const AttnFwdParams &p, const KArgs &a, int db, cudaStream_t st);
cudaError_t native_bwd(const AttnBwdParams &p, const KArgs &a, int db, cudaStream_t st);
cudaError_t tf32_fwd(const AttnFwdParams &p, const KArgs &a, int db, cudaStream_t st);
cudaError_t tf32_bwd(const AttnBwdParams &p, const KArgs &a, int db, cudaStream_t st);
// The bias gradient (p.dbias set): mma_dbias_kernel (NATIVE, TF32), sc_dbias_kernel (F32).
cudaError_t native_dbias(const AttnBwdParams &p, const KArgs &a, int db, cudaStream_t st);
cudaError_t tf32_dbias(const AttnBwdParams &p, const KArgs &a, int db, cudaStream_t st);
cudaError_t scalar_dbias(const AttnBwdParams &p, const KArgs &a, int db, cudaStream_t st);  // prec F32
cudaError_t scalar_fwd(const AttnFwdParams &p, const KArgs &a, int db, cudaStream_t st);
cudaError_t scalar_bwd(const AttnBwdParams &p, const KArgs &a, int db, cudaStream_t st);
cudaError_t sm90_fwd(const AttnFwdParams &p, const KArgs &a, int db, cudaStream_t st);  // sm90/fwd.cu
// f32 inputs on tf32 wgmma: stages K and Vᵀ in the workspace's kr/vt regions first (sm90/fwd.cu).
struct Workspace;
cudaError_t sm90_fwd_tf32(const AttnFwdParams &p, const KArgs &a, int db, const Workspace &w, void *workspace,
                          cudaStream_t st);
// f32 inputs, backward: dK/dV and dQ on tf32 wgmma (sm90/bwd.cu), after staging rounded copies.
cudaError_t sm90_bwd_tf32(const AttnBwdParams &p, const KArgs &a, int db, const Workspace &w, void *workspace,
                          cudaStream_t st);
// bf16/f16 (sm90/bwd.cu); the workspace holds the fused dQ's accumulator where it is on.
cudaError_t sm90_bwd(const AttnBwdParams &p, const KArgs &a, int db, const Workspace &w, void *workspace, cudaStream_t st);

// Opt in to more than 48 KiB of dynamic shared memory, then launch k(args...); nothing when the
// grid is empty.
template <typename Kernel, typename... Args>
cudaError_t launch_kernel(Kernel k, dim3 grid, int threads, size_t smem, cudaStream_t st, const Args &...args) {
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
#if defined(__CUDACC__)
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        if (e != cudaSuccess) return e;
    }
    k<<<grid, threads, smem, st>>>(args...);
    return cudaGetLastError();
#else
    (void)st;
    return fattn_emu_launch(k, grid, threads, smem, args...);
#endif
}

inline unsigned ceil_div_u(int64_t a, int64_t b) { return unsigned((a + b - 1) / b); }

}  // namespace fattn::cuda::attn
