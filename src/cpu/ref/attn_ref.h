// attn_ref.h — the float64 softmax-attention oracle (namespace fattn::ref).
//
// Naive and materialized on purpose: for every (sequence, query head) it builds the logits S,
// the probabilities P, dP and dS as full double matrices, straight from DESIGN §3. It is never a
// backend and never optimized; it shares no code with the kernels (its mask test and its f16/bf16
// decoding are written here from the definitions; it includes attn_params.h only to read the
// struct). Checked against central finite differences by tests/test_ref_grad.cpp and by
// `fattn-test grad`.
//
// Two layers:
//   core   — dense double arrays: q [B,Sq,Hq,D], k [B,Skv,Hkv,D], v [B,Skv,Hkv,Dv],
//            bias [B,Hq,Sq,Skv] (expanded; empty = none), o [B,Sq,Hq,Dv], lse [B,Hq,Sq].
//            Varlen: B = 1, Sq/Skv = total tokens, cu_q/cu_kv hold the sequence offsets.
//   gather — reads AttnFwdParams / AttnBwdParams whose pointers are host memory (any dtype,
//            any strides, broadcast bias) into core arrays and runs the core.
// A query row with no allowed key (masks and -inf bias together): o = 0, lse = -inf, its dq = 0
// and it contributes nothing to dk/dv — set directly, never through a 0/0.
// Each row's logits are taken relative to its largest allowed bias (an exact identity of
// softmax), so a row masked entirely by a finite huge-negative value (finfo.min, -1e9) keeps its
// scores: it attends to its keys by softmax(scale·q kᵀ), as exact arithmetic says.
#pragma once

#include <cstdint>
#include <vector>

#include "core/attn_params.h"

namespace fattn::ref {

// Masks as the public API states them: causal against its own diagonal, and a window
// (left, right; -1 = unbounded) against the window's diagonal. Diagonal of query i in a sequence
// of lengths (len_q, len_kv): i (top-left) or i + len_kv - len_q (bottom-right).
struct Mask {
    int causal = 0;  // 0 none, 1 top-left, 2 bottom-right
    int64_t window_left = -1;
    int64_t window_right = -1;
    bool window_bottom_right = false;
};

// True if query i may see key j (indices inside their sequence).
bool key_allowed(const Mask &m, int64_t i, int64_t j, int64_t len_q, int64_t len_kv);

struct Problem {
    int64_t B = 1, Sq = 0, Skv = 0, Hq = 1, Hkv = 1, D = 0, Dv = 0;
    double scale = 1.0;
    Mask mask;
    std::vector<int64_t> cu_q, cu_kv;  // varlen: num_seqs + 1 offsets each; empty = dense
    bool has_bias = false;             // bias is [B, Hq, Sq, Skv], expanded

    int64_t num_seqs() const { return cu_q.empty() ? B : int64_t(cu_q.size()) - 1; }
};

// Inputs (and the incoming gradient) of one problem, as dense doubles.
struct Tensors {
    std::vector<double> q, k, v, bias, dout;
};

struct Outputs {
    std::vector<double> o, lse;           // lse: -inf on fully-masked rows
    std::vector<int64_t> nvis;            // [B, Hq, Sq]: keys with a finite logit, per row
    std::vector<double> dq, dk, dv, dbias; // dbias only when asked for
};

// Core. fwd fills out->o, out->lse; bwd fills out->dq, dk, dv (and dbias when want_dbias and the
// problem has a bias). bwd recomputes the forward itself (it needs nothing from fwd).
void attn_fwd(const Problem &p, const Tensors &t, Outputs *out);
void attn_bwd(const Problem &p, const Tensors &t, Outputs *out, bool want_dbias = false);

// The bias gradient of a broadcast bias: full = out->dbias of attn_bwd ([B, Hq, Sq, Skv]) summed
// over the dims the bias broadcasts (sum_b, sum_h, sum_i), in double, into the reduced
// [B|1, Hq|1, Sq|1, Skv] array the C API's dbias holds.
void reduce_dbias(const Problem &p, const std::vector<double> &full, bool sum_b, bool sum_h,
                  bool sum_i, std::vector<double> *out);

// Gather layer: p's pointers must be host memory. Fills prob and t (t.dout only from bwd params).
void gather(const AttnFwdParams &p, Problem *prob, Tensors *t);
void gather(const AttnBwdParams &p, Problem *prob, Tensors *t);

// Sampled layer, for problems too big to materialize (fattn-test's large cases): single rows
// and single keys, read straight from host views, same definitions, O(keys·D) per row.
struct RowRef {
    double lse = 0;                // -inf when the row sees no key
    double ceil = 0;               // the row's largest allowed bias (0 when none)
    double lse_rel = 0;            // lse - ceil, kept apart (a huge ceil would swallow it)
    int64_t nvis = 0;              // keys with a finite logit
    std::vector<double> o, dq;     // [Dv], [D]
};
// Query row i (index inside sequence s) of query head h.
void attn_row(const AttnBwdParams &p, int64_t s, int64_t h, int64_t i, RowRef *r);
// Rows of sequence s whose logit for key j (query head h) is not -inf by mask or bias.
int64_t rows_seeing_key(const AttnFwdParams &p, int64_t s, int64_t h, int64_t j);
// dk [D] and dv [Dv] of key j (inside sequence s) of kv head hk: every query head of its group,
// every row that may see it.
void attn_key(const AttnBwdParams &p, int64_t s, int64_t hk, int64_t j, std::vector<double> *dk,
              std::vector<double> *dv);

// Decode one stored element (own implementation of f16/bf16, independent of core/dtype.h).
double decode(const void *base, fattn_dtype t, int64_t i);

}  // namespace fattn::ref
