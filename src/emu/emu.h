// emu.h — a CPU emulation of the CUDA execution model, enough to run the kernel bodies of
// src/cuda/path and src/cuda/attn (the portable families and the sm90 ones: wgmma, TMA, mbarriers)
// on the host (tests, and fattn-test --backend emu): the same source that nvcc compiles for the
// GPU, checked against the float64 oracle on any machine, in CI included.
//
// Model: the blocks of a grid run one after another; the threads of a block are fibers switched
// cooperatively at barriers (sync) and at warp collectives. A collective (shuffle, ldmatrix,
// mma.sync) is computed once, by the last lane of the warp to arrive, from what every lane
// deposited, with the PTX ISA's fragment maps. cp.async copies are performed at cp_wait(), and
// their destinations are poisoned (0xFF) when issued, so a read before the wait (or a write-after-
// read race on a ring buffer) shows up as NaN. Shared memory starts poisoned too. A barrier that
// not every thread reaches is reported as a deadlock (std::runtime_error), never hangs.
// The Hopper primitives: a wgmma is computed when issued, per thread, from the shared tiles its
// descriptors address (the 128-byte swizzle applied to the address, as the hardware does); a TMA
// box is copied when issued and completes its bytes on the mbarrier; a thread waiting on an
// mbarrier phase yields until it completes (a block where every running thread only waits is a
// deadlock); named barriers count their threads. Exited threads count as arrived at __syncthreads.
//
// Kernel code never calls this header directly: src/cuda/path/dev.cuh (the PaTH kernels) and
// emu/cuda_host.h (the CUDA built-ins the softmax kernels of src/cuda/attn use) map their
// primitives here when compiled without nvcc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace fattn::emu {

struct Grid {
    int x = 1, y = 1, z = 1;
};

struct Options {
    bool reverse = false;  // run the fibers of a block in reverse order (shakes out missing barriers)
};

// Run body(smem) on every thread of every block. smem_bytes of shared memory per block.
void launch(Grid grid, int threads, size_t smem_bytes, const std::function<void(char *)> &body,
            Options opt = {});

// Inside a body.
int tid();
int bid(int axis);  // 0 = x, 1 = y, 2 = z
void sync();        // __syncthreads()
int sync_or(int v); // __syncthreads_or(v): the barrier, then 1 if any thread passed non-zero
int block_threads();  // blockDim.x
char *smem();       // the running block's dynamic shared memory (the buffer body receives)

uint32_t shfl(uint32_t v, int src_lane);  // __shfl_sync(0xffffffff, v, src_lane)
uint32_t ballot(bool pred);               // __ballot_sync(0xffffffff, pred)

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: this lane supplies row (lane % 8) of matrix
// (lane / 8); r[i] receives matrix i's word for this lane.
void ldsm4(uint32_t (&r)[4], const void *row, bool trans);

enum MmaKind { MMA_F16, MMA_BF16, MMA_TF32 };
// The kind of an operand type: float is tf32; the 16-bit types specialize it where they are
// defined (emu/cuda_host.h, cuda/path/dev.cuh).
template <typename T> struct MmaKindOf;
template <> struct MmaKindOf<float> {
    static constexpr MmaKind kind = MMA_TF32;
};
// mma.sync.aligned.m16n8k16 (f16, bf16) / m16n8k8 (tf32), f32 accumulate, c += a b.
void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, MmaKind kind);

// The 32-bit shared-memory address of p (inside the running block's buffer, whose base is
// 1024-byte aligned like a CTA's dynamic shared memory): what __cvta_generic_to_shared gives.
uint32_t smem_addr(const void *p);

// wgmma.mma_async.sync.aligned.m64nNk16 (f16, bf16) / m64nNk8 (tf32), f32 accumulators, for the
// calling thread of its warpgroup (128 threads, warp w of it holding rows 16w .. 16w + 15):
// d[4j + i] = row 16w + lane/4 + 8(i/2), column 8j + 2(lane%4) + i%2, j < n/8. A is the shared
// tile of descriptor desc_a (K-major) or, with a_regs, this warp's m16n8k16 / m16n8k8 A fragment
// (all 32 lanes call together); B the shared tile of desc_b, K-major or (b_mn_major, 16-bit
// only) MN-major. Descriptors as ptx.cuh's desc_sw128 builds them: 128-byte swizzle only. tf32
// truncates its inputs as the hardware does. Computed when issued: the kernel's fences, commits
// and waits order nothing further here.
void wgmma(float *d, int n, MmaKind kind, const uint32_t *a_regs, uint64_t desc_a, uint64_t desc_b, bool b_mn_major,
           bool accumulate);

// ---- the Hopper (sm_90a) primitives of the sm90 softmax kernels (cuda/attn/sm90/ptx.cuh) ----
// mbarriers (CTA scope): an expected arrival count, the pending arrivals and transaction bytes
// of the current phase, and the phase's parity. A phase completes when both reach zero.
void mbar_init(void *bar, uint32_t count);
void mbar_arrive(void *bar, uint32_t expect_tx_bytes);  // mbarrier.arrive[.expect_tx]
// mbarrier.try_wait.parity: whether the phase of this parity has completed; when not, the
// calling fiber yields (the caller spins). A block whose every running thread spins, with no
// barrier event in between, is reported as a deadlock.
bool mbar_try_wait(void *bar, uint32_t parity);
// A TMA tensor map as the emulation encodes it into the 128 bytes of a CUtensorMap: a 4-D view
// (element size es; dims innermost first; byte strides of dims 1..3) read in boxes of
// box[0] × box[1] × 1 × 1 elements with the 128-byte swizzle.
struct TensorMap {
    const void *base;
    int64_t es;
    int64_t dims[4];
    int64_t strides[3];
    int64_t box[2];
};
// cp.async.bulk.tensor.4d ... mbarrier::complete_tx::bytes: the box at (c0, c1, c2, c3) into
// dst (128-byte swizzled rows of box[0] elements; coordinates outside the view read zero), then
// the box's bytes completed on bar. Performed when issued.
void tma_load(void *dst, const TensorMap &map, void *bar, int c0, int c1, int c2, int c3);
void named_sync(int id, int threads);    // bar.sync id, threads
void named_arrive(int id, int threads);  // bar.arrive id, threads: counts toward the barrier, no wait
// (a named barrier that has arrivals left when its block ends is reported: an unmatched arrive)
// cp.async.bulk.global.shared::cta (add: cp.reduce.async.bulk ... .add.f32): bytes (a multiple of
// 16, both addresses 16-byte aligned) from shared memory s to global g, performed when issued.
void bulk_s2g(void *g, const void *s, uint32_t bytes, bool add_f32);
// A CTA spinning until a global counter reads v: blocks run one after another here, so no other
// block can change it while this one waits; a value other than v is reported as a deadlock (the
// waiter depends on a block that starts after it: on the GPU, one that may never be resident).
void counter_wait_eq(const int *c, int v);
void syncwarp();                       // __syncwarp()

// cp.async.cg.shared.global 16 bytes (src_bytes < 16: the rest is zero-filled), commit_group,
// wait_group(n): all but the n newest committed groups have landed.
void cp16(void *smem, const void *gmem, int src_bytes);
void cp4(void *smem, const void *gmem, int src_bytes);  // cp.async.ca 4 bytes
void cp_commit();
void cp_wait(int n);

// A vector access of n bytes at p must be n-byte aligned, as on the GPU (throws std::logic_error
// naming `what`, as cp16 does).
void check_align(const void *p, size_t n, const char *what);

// Bit patterns and conversions the kernels use (round to nearest even; tf32: nearest, ties away).
uint16_t f32_to_f16_bits(float x);
uint16_t f32_to_bf16_bits(float x);
float f16_bits_to_f32(uint16_t h);
float bf16_bits_to_f32(uint16_t h);
uint32_t f32_to_tf32_bits(float x);

// Exact tf32 (a test's switch, off by default): the tf32 products (mma.sync, wgmma) take their f32
// operands whole and f32_to_tf32_bits returns x unchanged, so an f32 kernel computes in f32 and
// meets the float64 oracle to f32 rounding: the residual is the kernels' own, not tf32's. Applies
// to every launch until set back.
void set_exact_tf32(bool on);
bool exact_tf32();

}  // namespace fattn::emu
