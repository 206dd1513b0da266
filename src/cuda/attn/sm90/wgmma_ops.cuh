// wgmma_ops.cuh — the wgmma.mma_async wrappers of the sm_90 kernels.
// wgmma.mma_async m64nNk16 with f32 accumulators d[N/2] (per thread of the warpgroup):
//   Wgmma<T, N>::ss(d, desc_a, desc_b, acc)         A and B from shared memory (K-major both)
//   Wgmma<T, N>::ss_tb(d, desc_a, desc_b, acc)      the same with B MN-major (bf16/f16 only)
//   Wgmma<T, N>::rs<TB>(d, a[4], desc_b, acc)       A from registers (the m16n8k16 A fragment
//                                                   of each warp's 16 rows), B transposed if TB
// T = float is tf32 (m64nNk8; a[4] is the m16n8k8 tf32 A fragment: rows g, g + 8 × columns t,
// t + 4). tf32 takes K-major operands only (TB must be 0) and truncates its inputs: round them
// first (cvt.rna.tf32.f32).
// acc = 0 overwrites d (scale-d false), 1 accumulates. Issue between wgmma_fence() and
// wgmma_commit(); the results are valid after wgmma_wait<>().
#pragma once

#include <cstdint>

#if !defined(__CUDACC__)
// The CPU emulation (ptx.cuh): one generic wrapper over emu::wgmma, the operand type's kind from
// emu::MmaKindOf.
#include "emu/emu.h"

namespace fattn::cuda::sm90 {

template <typename T, int N> struct Wgmma {
    static void ss(float (&d)[N / 2], uint64_t da, uint64_t db, int acc) {
        emu::wgmma(d, N, emu::MmaKindOf<T>::kind, nullptr, da, db, false, acc != 0);
    }
    static void ss_tb(float (&d)[N / 2], uint64_t da, uint64_t db, int acc) {
        static_assert(sizeof(T) == 2, "tf32 wgmma takes K-major B only");
        emu::wgmma(d, N, emu::MmaKindOf<T>::kind, nullptr, da, db, true, acc != 0);
    }
    template <int TB> static void rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int acc) {
        static_assert(sizeof(T) == 2 || TB == 0, "tf32 wgmma takes K-major B only");
        emu::wgmma(d, N, emu::MmaKindOf<T>::kind, a, 0, db, TB != 0, acc != 0);
    }
};

}  // namespace fattn::cuda::sm90
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// Per accumulator count NA (N / 2): the PTX list of the accumulators, their asm operands and the
// numbers of the operands after them (FATTN_WGMMA_{REGS,OPS,SS,RS,TB}_NA), generated.
#include "cuda/attn/sm90/wgmma_operands.h"

// The two statements: NA accumulators, SHAPE "m64nNkK.f32.T.T", TR the transpose immediates
// (bf16/f16) or nothing (tf32), TB_CHECK a statement ahead of rs's asm, and the variadic part
// rs's operands after acc (B's transpose immediate, or nothing).
#define FATTN_WGMMA_ASM(P, AB, NA, SHAPE, TR)                  \
    "{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"             \
    "wgmma.mma_async.sync.aligned." SHAPE " " FATTN_WGMMA_REGS_##NA ", " AB ", p, 1, 1" TR ";\n}\n"
#define FATTN_WGMMA_ASM_(...) FATTN_WGMMA_ASM(__VA_ARGS__)
#define FATTN_WGMMA_SS(NA, SHAPE, TR, NAME)                                                         \
    __device__ __forceinline__ static void NAME(float (&d)[NA], uint64_t da, uint64_t db, int acc) {\
        asm volatile(FATTN_WGMMA_ASM_(FATTN_WGMMA_SS_##NA, NA, SHAPE, TR)                           \
                     : FATTN_WGMMA_OPS_##NA                                                         \
                     : "l"(da), "l"(db), "r"(acc));                                                 \
    }
#define FATTN_WGMMA_RS(NA, SHAPE, TR, TB_CHECK, ...)                                                \
    template <int TB>                                                                               \
    __device__ __forceinline__ static void rs(float (&d)[NA], const uint32_t (&a)[4], uint64_t db, \
                                              int acc) {                                            \
        TB_CHECK                                                                                    \
        asm volatile(FATTN_WGMMA_ASM_(FATTN_WGMMA_RS_##NA, NA, SHAPE, TR)                           \
                     : FATTN_WGMMA_OPS_##NA                                                         \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc) __VA_ARGS__);  \
    }
// One specialization: bf16/f16 (k16, with the transpose immediates) or tf32 (k8, K-major only).
#define FATTN_WGMMA_K16(CT, TY, N, NA)                                                              \
    template <> struct Wgmma<CT, N> {                                                               \
        FATTN_WGMMA_SS(NA, "m64n" #N "k16.f32." TY "." TY, ", 0, 0", ss)                           \
        FATTN_WGMMA_SS(NA, "m64n" #N "k16.f32." TY "." TY, ", 0, 1", ss_tb)                        \
        FATTN_WGMMA_RS(NA, "m64n" #N "k16.f32." TY "." TY, FATTN_WGMMA_TB_##NA, , , "n"(TB))        \
    };
#define FATTN_WGMMA_K8(N, NA)                                                                       \
    template <> struct Wgmma<float, N> {                                                            \
        FATTN_WGMMA_SS(NA, "m64n" #N "k8.f32.tf32.tf32", "", ss)                                   \
        FATTN_WGMMA_RS(NA, "m64n" #N "k8.f32.tf32.tf32", "",                                       \
                       static_assert(TB == 0, "tf32 wgmma takes K-major B only");, )                \
    };

namespace fattn::cuda::sm90 {

template <typename T, int N> struct Wgmma;

// The shapes the kernels use (another N needs its N / 2 in scripts/gen_wgmma.py's NAS)
FATTN_WGMMA_K16(__nv_bfloat16, "bf16", 64, 32)
FATTN_WGMMA_K16(__nv_bfloat16, "bf16", 128, 64)
FATTN_WGMMA_K16(__half, "f16", 64, 32)
FATTN_WGMMA_K16(__half, "f16", 128, 64)
#if FATTN_SM90_D256
FATTN_WGMMA_K16(__nv_bfloat16, "bf16", 256, 128)
FATTN_WGMMA_K16(__half, "f16", 256, 128)
FATTN_WGMMA_K16(__nv_bfloat16, "bf16", 32, 16)  // dQ's S and dP at D 256 (32-key steps)
FATTN_WGMMA_K16(__half, "f16", 32, 16)
#endif
FATTN_WGMMA_K8(32, 16)
FATTN_WGMMA_K8(64, 32)
FATTN_WGMMA_K8(128, 64)

}  // namespace fattn::cuda::sm90

#undef FATTN_WGMMA_ASM
#undef FATTN_WGMMA_ASM_
#undef FATTN_WGMMA_SS
#undef FATTN_WGMMA_RS
#undef FATTN_WGMMA_K16
#undef FATTN_WGMMA_K8
#endif  // __CUDACC__
