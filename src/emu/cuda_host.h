// cuda_host.h — the CUDA built-ins the fused softmax-attention kernels (src/cuda/attn) use, for a
// host compiler, on top of the CPU emulation of emu.h: thread/block indices, barriers (plain and
// __syncthreads_or), warp shuffles and ballots, the 16-bit storage types and their conversions,
// the vector types. With it the kernel sources compile unchanged into the emulation
// (src/emu/attn_emu.cpp) and run on the CPU against the float64 oracle.
//
// Included in place of <cuda_fp16.h> / <cuda_bf16.h> when __CUDACC__ is not defined; never part
// of libfattn. Only what the kernels use is here: a new built-in in a kernel body fails to compile
// in the emulation build until it is added.
#pragma once

#if defined(__CUDACC__)
#error "emu/cuda_host.h is for host compilers; nvcc uses the CUDA headers"
#endif

#include <math.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "emu/emu.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

struct fattn_emu_dim3 {
    unsigned x, y, z;
};
inline fattn_emu_dim3 fattn_emu_thread_idx() { return {unsigned(fattn::emu::tid()), 0u, 0u}; }
inline fattn_emu_dim3 fattn_emu_block_idx() {
    return {unsigned(fattn::emu::bid(0)), unsigned(fattn::emu::bid(1)), unsigned(fattn::emu::bid(2))};
}
inline fattn_emu_dim3 fattn_emu_block_dim() { return {unsigned(fattn::emu::block_threads()), 1u, 1u}; }
#define threadIdx (fattn_emu_thread_idx())
#define blockIdx (fattn_emu_block_idx())
#define blockDim (fattn_emu_block_dim())

#define __grid_constant__

inline void __syncthreads() { fattn::emu::sync(); }
inline void __syncwarp() { fattn::emu::syncwarp(); }
inline int __syncthreads_or(int v) { return fattn::emu::sync_or(v); }

template <typename V> inline V __shfl_sync(unsigned, V v, int src_lane) {
    static_assert(sizeof(V) == 4, "32-bit shuffles only");
    uint32_t u;
    std::memcpy(&u, &v, 4);
    u = fattn::emu::shfl(u, src_lane);
    std::memcpy(&v, &u, 4);
    return v;
}
template <typename V> inline V __shfl_xor_sync(unsigned, V v, int lane_mask) {
    return __shfl_sync(0u, v, (fattn::emu::tid() & 31) ^ lane_mask);
}
inline unsigned __ballot_sync(unsigned, int pred) { return fattn::emu::ballot(pred != 0); }
inline int __all_sync(unsigned, int pred) { return fattn::emu::ballot(pred != 0) == 0xFFFFFFFFu; }
inline int __any_sync(unsigned, int pred) { return fattn::emu::ballot(pred != 0) != 0u; }
inline int __ffs(unsigned x) { return __builtin_ffs(int(x)); }

inline float __uint_as_float(uint32_t u) { return fattn::f32_from_bits(u); }
inline uint32_t __float_as_uint(float f) { return fattn::f32_bits(f); }

// Vector types with CUDA's alignment (a misaligned vector access faults on the GPU).
struct alignas(8) uint2 {
    uint32_t x, y;
};
struct alignas(16) uint4 {
    uint32_t x, y, z, w;
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }

// 16-bit storage types: the bits, converted with round to nearest even as the CUDA intrinsics do.
struct __half {
    uint16_t bits;
};
struct __nv_bfloat16 {
    uint16_t bits;
};
struct alignas(4) __half2 {
    __half x, y;
};
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
template <> struct fattn::emu::MmaKindOf<__half> {
    static constexpr MmaKind kind = MMA_F16;
};
template <> struct fattn::emu::MmaKindOf<__nv_bfloat16> {
    static constexpr MmaKind kind = MMA_BF16;
};
inline float __half2float(__half h) { return fattn::emu::f16_bits_to_f32(h.bits); }
inline float __bfloat162float(__nv_bfloat16 h) { return fattn::emu::bf16_bits_to_f32(h.bits); }
inline __half __float2half_rn(float x) { return {fattn::emu::f32_to_f16_bits(x)}; }
inline __nv_bfloat16 __float2bfloat16_rn(float x) { return {fattn::emu::f32_to_bf16_bits(x)}; }
inline __half __ushort_as_half(unsigned short u) { return {uint16_t(u)}; }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return {__bfloat162float(h.x), __bfloat162float(h.y)}; }
inline __half2 __floats2half2_rn(float lo, float hi) { return {__float2half_rn(lo), __float2half_rn(hi)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
    return {__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}

// `extern __shared__ T name[]` inside a kernel: FATTN_DYN_SMEM (cuda/attn/common.cuh) names the
// running block's buffer instead.
#define FATTN_EMU_DYN_SMEM(name) unsigned char *name = reinterpret_cast<unsigned char *>(fattn::emu::smem())
