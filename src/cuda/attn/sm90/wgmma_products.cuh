// wgmma_products.cuh — the two whole-tile wgmma products of the sm_90a kernels, on the 128-byte
// swizzled panels of ptx.cuh (a [rows, D] 16-bit tile as D/64 panels of [rows, 64]): A·Bᵀ with
// both operands in shared memory, and A·B with A as register fragments. Issued only: the caller
// fences before (wgmma_fence), commits after and waits. Used by the softmax kernels (sm90/) and
// the PaTH dK/dV, seg-inter and history kernels (cuda/path/*_sm90.cuh).
#pragma once

#include <cstdint>

#include "cuda/attn/sm90/ptx.cuh"
#include "cuda/attn/sm90/wgmma_ops.cuh"

namespace fattn::cuda::attn {

// acc += A·B over NK k-steps, A as register fragments (sm90_a_frag), B in shared memory: tf32
// from a transposed copy's [D, 32] panels at t_base (K-major), 16-bit from a row tile at
// rows_base read MN-major (its rows are the k index; panels of 64 columns rows_panel bytes apart).
// The backward's dV += Pᵀ·dO, dK += dSᵀ·Q and dQ += dS·K.
template <typename T, int D, int NK>
FATTN_SM90_DEV void sm90_rs_product(float (&acc)[D / 2], const uint32_t (&a)[NK][4], uint32_t t_base,
                                                uint32_t rows_base, uint32_t rows_panel) {
    using namespace sm90;
#pragma unroll
    for (int kk = 0; kk < NK; ++kk) {
        if constexpr (sizeof(T) == 4)
            Wgmma<T, D>::template rs<0>(acc, a[kk], desc_sw128(t_base + uint32_t((kk / 4) * D * 128 + (kk % 4) * 32), 16, 1024), 1);
        else
            Wgmma<T, D>::template rs<1>(acc, a[kk], desc_sw128(rows_base + uint32_t(kk * 16 * 128), rows_panel, 1024), 1);
    }
}

// acc = A·Bᵀ over the D columns of two row tiles in shared memory, both K-major in 128-byte swizzled
// panels (one wgmma per 32 bytes of a panel row; a_panel, b_panel: the bytes from one panel of a
// tile to the next). Issued only: the caller fences before and commits after. The forward's
// S = Q·Kᵀ, dQ's S and dP = dO·Vᵀ, and dK/dV's Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ.
template <typename T, int D, int N>
FATTN_SM90_DEV void sm90_ss_product(float (&acc)[N / 2], uint32_t a_base, uint32_t a_panel, uint32_t b_base,
                                                uint32_t b_panel) {
    using namespace sm90;
    constexpr int KS = sizeof(T) == 4 ? 8 : 16;  // k of one wgmma (32 bytes of a panel row)
#pragma unroll
    for (int kk = 0; kk < D / KS; ++kk) {
        const uint32_t offa = uint32_t((kk / 4) * a_panel + (kk % 4) * 32);
        const uint32_t offb = uint32_t((kk / 4) * b_panel + (kk % 4) * 32);
        Wgmma<T, N>::ss(acc, desc_sw128(a_base + offa, 16, 1024), desc_sw128(b_base + offb, 16, 1024), kk > 0);
    }
}

// acc (+)= A·Bᵀ over D columns, A as register fragments (the m16n8k16 A fragment of each warp's
// 16 rows per 16 columns), B a row tile in shared memory read K-major (128-byte swizzled panels of
// 64 columns, b_panel bytes apart); the first k-step overwrites acc unless accumulate. 16-bit only.
// The PaTH walk's X·Wᵀ (cuda/path/walk_sm90.cuh), X changing every step.
template <typename T, int D, int N>
FATTN_SM90_DEV void sm90_rs_product_kmajor(float (&acc)[N / 2], const uint32_t (&a)[D / 16][4], uint32_t b_base,
                                                       uint32_t b_panel, bool accumulate) {
    using namespace sm90;
    static_assert(sizeof(T) == 2, "16-bit operands");
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t offb = uint32_t((kk / 4) * b_panel + (kk % 4) * 32);
        Wgmma<T, N>::template rs<0>(acc, a[kk], desc_sw128(b_base + offb, 16, 1024), kk > 0 || accumulate ? 1 : 0);
    }
}

}  // namespace fattn::cuda::attn
