// ptx.cuh — the Hopper (sm_90a) primitives of the sm90 kernel family, as thin inline-PTX
// wrappers: mbarriers, bulk tensor (TMA) loads, wgmma fences/commit/wait, shared-memory matrix
// descriptors for 128-byte swizzled tiles, and warpgroup register reallocation.
//
// Tile layout every sm90 kernel uses (what TMA writes with CU_TENSOR_MAP_SWIZZLE_128B and a
// 64-element inner box): a [rows, D] 16-bit tile is stored as D/64 "panels" of [rows, 64]; a
// panel row is 128 bytes, panels are rows·128 bytes apart, and every panel starts 1024-byte
// aligned, so the swizzle pattern (16-byte chunk ^= row % 8) repeats per 8 rows.
//
// Compiled by a host compiler (the CPU emulation, src/emu) every primitive maps to emu.h: the
// mbarriers, TMA boxes and named barriers, and the wgmma wrappers (wgmma_ops.cuh), whose products
// are computed when issued, so the fences, commits and waits have nothing left to order.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#include <cuda.h>  // CUtensorMap (a plain struct; no driver call is made from device code)
#define FATTN_SM90_DEV __device__ __forceinline__
#else
#include "emu/emu.h"
#define FATTN_SM90_DEV inline
// cuda.h's tensor map: 128 opaque bytes, which the emulation's encoder (src/emu/sm90_map_emu.cpp)
// fills with an emu::TensorMap.
struct CUtensorMap {
    alignas(64) unsigned long long opaque[16];
};
static_assert(sizeof(fattn::emu::TensorMap) <= sizeof(CUtensorMap), "emu tensor map fits a CUtensorMap");
#endif

namespace fattn::cuda::sm90 {

#if !defined(__CUDACC__)
inline uint32_t saddr(const void *p) { return emu::smem_addr(p); }
inline void mbar_init(uint64_t *bar, uint32_t count) { emu::mbar_init(bar, count); }
inline void mbar_fence_init() {}
inline int thread_x() { return emu::tid(); }
inline void cta_sync() { emu::sync(); }
inline void warp_sync() { emu::syncwarp(); }
inline void mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes) { emu::mbar_arrive(bar, bytes); }
inline void mbar_arrive(uint64_t *bar) { emu::mbar_arrive(bar, 0); }
inline bool mbar_try_wait(uint64_t *bar, uint32_t parity) { return emu::mbar_try_wait(bar, parity); }
inline void mbar_wait(uint64_t *bar, uint32_t parity) {
    while (!mbar_try_wait(bar, parity)) {
    }
}
inline void tma_load_4d(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1, int c2, int c3) {
    emu::tma_load(dst, *reinterpret_cast<const emu::TensorMap *>(map->opaque), bar, c0, c1, c2, c3);
}
inline void tma_prefetch_desc(const CUtensorMap *) {}
inline void named_barrier_sync(int id, int threads) { emu::named_sync(id, threads); }
inline void named_barrier_arrive(int id, int threads) { emu::named_arrive(id, threads); }
inline void wgmma_fence() {}
inline void wgmma_commit() {}
template <int N> inline void wgmma_wait() {}
inline void fence_proxy_async_smem() {}
template <typename R> inline void reg_fence(R &) {}
inline uint32_t opaque(uint32_t x) { return x; }
template <int R> inline void regs_dealloc() {}
template <int R> inline void regs_alloc() {}
inline void bulk_s2g(void *g, const void *s, uint32_t bytes) { emu::bulk_s2g(g, s, bytes, false); }
inline void bulk_s2g_add_f32(float *g, const float *s, uint32_t bytes) { emu::bulk_s2g(g, s, bytes, true); }
inline void bulk_commit() {}
template <int N> inline void bulk_wait_read() {}
template <int N> inline void bulk_wait() {}
inline void fence_proxy_async_global() {}
inline void counter_wait_eq(const int *c, int v) { emu::counter_wait_eq(c, v); }
inline void counter_release_inc(int *c) { ++*c; }
#else
__device__ __forceinline__ uint32_t saddr(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarriers (CTA scope) ----
__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(saddr(bar)), "r"(count) : "memory");
}
// Make the initialized barriers visible to the async (TMA) proxy before first use.
__device__ __forceinline__ void mbar_fence_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// The thread's index in its CTA, __syncthreads and __syncwarp (the emulation's above).
__device__ __forceinline__ int thread_x() { return int(threadIdx.x); }
__device__ __forceinline__ void cta_sync() { __syncthreads(); }
__device__ __forceinline__ void warp_sync() { __syncwarp(); }
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(saddr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(saddr(bar)) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint64_t *bar, uint32_t parity) {
    uint32_t ok;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(ok)
        : "r"(saddr(bar)), "r"(parity)
        : "memory");
    return ok != 0;
}
// Wait until the barrier's phase with this parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
    while (!mbar_try_wait(bar, parity)) {
    }
}

// ---- TMA: one box of a 4-D tensor map into shared memory, completing on an mbarrier ----
__device__ __forceinline__ void tma_load_4d(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1,
                                            int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
        "[%6];" ::"r"(saddr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(saddr(bar))
        : "memory");
}
__device__ __forceinline__ void tma_prefetch_desc(const CUtensorMap *map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- wgmma ordering ----
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Orders this thread's generic-proxy writes to shared memory before later async-proxy reads
// (wgmma operands, TMA stores); the readers still need a barrier after it.
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Counts this thread's warp toward named barrier `id` without waiting for it (bar.arrive).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// ---- bulk copies shared -> global (the fused dQ's tiles: bwd_dkdv_kernel.cuh) ----
// `bytes` (a multiple of 16) from 16-byte aligned s to 16-byte aligned g: a copy, or an f32 add
// performed at the L2 (each element atomically, the copy as a whole in no particular order).
// They complete in bulk groups of the issuing thread: bulk_commit closes a group,
// bulk_wait_read<N> waits until all but N groups have read their shared memory, bulk_wait<N>
// until their writes are done.
__device__ __forceinline__ void bulk_s2g(void *g, const void *s, uint32_t bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(g), "r"(saddr(s)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_s2g_add_f32(float *g, const float *s, uint32_t bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(g), "r"(saddr(s)),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}
// Orders this thread's generic-proxy and async-proxy (bulk copy) accesses of global memory.
__device__ __forceinline__ void fence_proxy_async_global() {
    asm volatile("fence.proxy.async.global;" ::: "memory");
}
// ---- a per-tile counter in global memory that orders CTAs (GPU scope) ----
// Spin until *c == v; later accesses are ordered after the read (acquire).
__device__ __forceinline__ void counter_wait_eq(const int *c, int v) {
    int x;
    do {
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(x) : "l"(c) : "memory");
    } while (x != v);
}
// *c += 1, ordered after this thread's earlier accesses (release).
__device__ __forceinline__ void counter_release_inc(int *c) {
    asm volatile("fence.acq_rel.gpu;\nred.relaxed.gpu.global.add.s32 [%0], 1;" ::"l"(c) : "memory");
}
// Keeps the compiler from moving accesses of accumulator registers across a wgmma wait/fence.
template <int N> __device__ __forceinline__ void reg_fence(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N> __device__ __forceinline__ void reg_fence(uint32_t (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}
// A-fragment arrays: also keeps their registers from being reused before the wait that ends the
// wgmma reading them.
template <int M, int N> __device__ __forceinline__ void reg_fence(uint32_t (&r)[M][N]) {
#pragma unroll
    for (int i = 0; i < M; ++i) reg_fence(r[i]);
}

#endif  // __CUDACC__

// ---- written once over the primitives of either branch ----
// The query-side kernels' pipeline (forward, dQ): bars = [Q][K full × S][V full × S] and then
// NE arrays of S "empty" barriers, one arrival per consumer warp (8); thread 0 initializes them
// stage by stage, then the CTA syncs.
template <int S, int NE> FATTN_SM90_DEV void mbar_init_query_pipeline(uint64_t *bars) {
    if (thread_x() == 0) {
        mbar_init(bars, 1);
        for (int s = 0; s < S; ++s) {
            mbar_init(&bars[1 + s], 1);
            mbar_init(&bars[1 + S + s], 1);
            for (int e = 0; e < NE; ++e) mbar_init(&bars[1 + (2 + e) * S + s], 8);
        }
        mbar_fence_init();
    }
    cta_sync();
}
// One arrival per warp (an empty barrier counting warps): after the warp's reads, lane 0 arrives.
FATTN_SM90_DEV void mbar_arrive_warp(uint64_t *bar) {
    warp_sync();
    if (thread_x() % 32 == 0) mbar_arrive(bar);
}

// ---- shared-memory matrix descriptors, 128-byte swizzle ----
// K-major operand (rows of K elements; Q and K of S = Q·Kᵀ): the 8-row groups of a panel are
// 1024 bytes apart (SBO); LBO is unused with this swizzle. A k-step of 16 elements starts 32
// bytes further into the panel row (the hardware applies the swizzle to the final address).
// MN-major operand (V of O = P·V: rows are keys = K, the 64 elements of a panel row are N):
// 8-key groups 1024 bytes apart (SBO), panels of 64 N-columns LBO bytes apart.
FATTN_SM90_DEV uint64_t desc_sw128(uint32_t smem_byte_addr, uint32_t lbo, uint32_t sbo) {
    return uint64_t((smem_byte_addr & 0x3FFFF) >> 4) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
           (uint64_t((sbo >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}

#if defined(__CUDACC__)

// x, but opaque to the optimizer: a value formed from it is not hoisted out of the loop it is read
// in (so loop-invariant wgmma descriptors are rebuilt where used instead of held in registers).
__device__ __forceinline__ uint32_t opaque(uint32_t x) {
    asm volatile("mov.b32 %0, %0;" : "+r"(x));
    return x;
}

// ---- warpgroup register reallocation (needs a register cap at entry: __launch_bounds__(n, 1)) ----
template <int R> __device__ __forceinline__ void regs_dealloc() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R> __device__ __forceinline__ void regs_alloc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}
#endif  // __CUDACC__

}  // namespace fattn::cuda::sm90
