// attn_params.h — the one plain params struct every softmax-attention backend consumes.
//
// The C API validates the user's views (src/core/attn_validate.cpp) and fills these structs once;
// the CPU fused/exact kernels, the CUDA kernels and the float64 oracle all read the same fields.
// Backward extends forward (FlashAttention's Qkv_params -> fwd -> bwd pattern). No framework
// types, no C++ beyond plain data + a few inline index helpers, so .cu files can include it.
//
// Index conventions (all element offsets, 64-bit):
//   q element (b, i, h, d)  at q + b*q_sb + i*q_ss + h*q_sh + d         (innermost stride is 1)
//   lse element (b, h, i)   at lse + b*lse_sb + h*lse_sh + i
//   bias element (b,h,i,j)  at bias + b*bias_sb + h*bias_sh + i*bias_si + j  (stride 0 = broadcast)
// In varlen mode the tensors have B = 1; "sequence" s covers packed rows
// [seq_q_begin(s), seq_q_begin(s) + seq_len_q(s)) of batch 0, and the bias/lse are indexed by
// packed positions. In dense mode sequence s is batch s with offset 0 inside it.
#pragma once

#include <cstdint>

#include "fattn/fattn.h"

#if defined(__CUDACC__)
#define FATTN_HD __host__ __device__ __forceinline__
#else
#define FATTN_HD inline
#endif

namespace fattn {

struct AttnFwdParams {
    // ---- geometry ----
    int64_t batch;        // number of sequences: B (dense) or num_seqs (varlen)
    int64_t seqlen_q;     // dense: Sq. varlen: max sequence length (max_seqlen_q)
    int64_t seqlen_kv;    // dense: Skv. varlen: max_seqlen_kv
    int64_t total_q;      // rows of q in the S dim of the view: Sq (dense) or total tokens (varlen)
    int64_t total_kv;
    int64_t hq, hkv;      // heads; group size hq / hkv
    int64_t d, dim_v;     // head dims of q/k and of v/o (dim_v, so the bwd gradient `dv` can't hide it)

    fattn_dtype dtype;    // q, k, v, o (and dout, dq, dk, dv in bwd)
    fattn_prec prec;      // resolved: never AUTO
    fattn_algo algo;
    float scale;          // resolved: never 0

    // ---- tensors (element strides) ----
    const void *q; int64_t q_sb, q_ss, q_sh;
    const void *k; int64_t k_sb, k_ss, k_sh;
    const void *v; int64_t v_sb, v_ss, v_sh;
    void *o;       int64_t o_sb, o_ss, o_sh;
    float *lse;    int64_t lse_sb, lse_sh;  // innermost (query index) stride is 1

    // ---- bias (bias == nullptr: none) ----
    const void *bias; fattn_dtype bias_dtype;
    int64_t bias_sb, bias_sh, bias_si;       // 0 where broadcast; innermost (key) stride is 1

    // ---- masks: normalized ----
    // Query i (index inside its sequence) may see key j (inside its sequence) iff
    //   (win_left  < 0 || j >= diag(i) - win_left) && (win_right < 0 || j <= diag(i) + win_right)
    // with diag(i) = i + (bottom_right ? len_kv - len_q : 0) for the sequence's own lengths.
    // Causal is folded in as win_right = 0 (a causal + window request keeps its window_left).
    int64_t win_left, win_right;
    bool bottom_right;

    // ---- varlen (nullptr: dense). Pointers live in the context's memory space. ----
    const int32_t *cu_seqlens_q;
    const int32_t *cu_seqlens_kv;

    // ---- requests beyond O/LSE and dQ/dK/dV (fattn_attn_*_ex): seen by the selection ----
    bool want_dbias;      // the backward also writes dbias (AttnBwdParams::dbias)

    // ---- backend knobs ----
    int nthreads;         // CPU
    void *stream;         // CUDA (cudaStream_t)

    FATTN_HD int64_t group() const { return hq / hkv; }
    FATTN_HD bool has_mask() const { return win_left >= 0 || win_right >= 0; }
};

struct AttnBwdParams : AttnFwdParams {
    const void *dout; int64_t do_sb, do_ss, do_sh;
    void *dq;         int64_t dq_sb, dq_ss, dq_sh;
    void *dk;         int64_t dk_sb, dk_ss, dk_sh;
    void *dv;         int64_t dv_sb, dv_ss, dv_sh;
    // dbias (nullptr: not requested): f32, the bias's shape reduced over its broadcast dims, so
    // element (b, h, i, j) of the bias's index space is at dbias + b*dbias_sb + h*dbias_sh +
    // i*dbias_si + j, with a stride 0 exactly where the bias's is 0 (the sum runs over that dim).
    float *dbias;     int64_t dbias_sb, dbias_sh, dbias_si;
};

// ---- sequence geometry shared by every backend (host and device) ----

// Sequence s of a dense or varlen problem: where its rows start (in the S dim of batch
// `batch_index`) and how long it is. Dense: batch_index = s, begin = 0.
struct SeqRange {
    int64_t batch_index;  // index into the B dim of the views (0 in varlen mode)
    int64_t q_begin, q_len;
    int64_t kv_begin, kv_len;
};

FATTN_HD SeqRange seq_range(const AttnFwdParams &p, int64_t s) {
    SeqRange r;
    if (p.cu_seqlens_q) {
        r.batch_index = 0;
        r.q_begin = p.cu_seqlens_q[s];
        r.q_len = int64_t(p.cu_seqlens_q[s + 1]) - r.q_begin;
        r.kv_begin = p.cu_seqlens_kv[s];
        r.kv_len = int64_t(p.cu_seqlens_kv[s + 1]) - r.kv_begin;
    } else {
        r.batch_index = s;
        r.q_begin = 0;
        r.q_len = p.seqlen_q;
        r.kv_begin = 0;
        r.kv_len = p.seqlen_kv;
    }
    return r;
}

// Allowed key range [lo, hi] (inclusive, clamped to [0, kv_len-1]) for query i of a sequence
// with lengths q_len, kv_len; empty when lo > hi. Keys outside it are -inf before any bias.
FATTN_HD void key_range(const AttnFwdParams &p, int64_t i, int64_t q_len, int64_t kv_len,
                        int64_t *lo, int64_t *hi) {
    int64_t diag = i + (p.bottom_right ? kv_len - q_len : 0);
    int64_t l = p.win_left >= 0 ? diag - p.win_left : 0;
    int64_t h = p.win_right >= 0 ? diag + p.win_right : kv_len - 1;
    *lo = l < 0 ? 0 : l;
    *hi = h > kv_len - 1 ? kv_len - 1 : h;
}

}  // namespace fattn
