/*
 * fattn_ggml.h — fattn's exact attention as a differentiable ggml op (CPU backend), and PaTH
 * attention as a second one (fattn_ggml_path_attn, below).
 *
 * One call puts softmax attention in a ggml graph; ggml_build_backward_expand (ggml-opt too)
 * differentiates through it with fattn's fused backward, so a trainer never materialises the
 * [Skv, Sq, H] probabilities. Needs ggml with the custom-op backward hook
 * (ggml_custom_set_backward, patches/0001-ggml-custom-op-backward.patch of this folder).
 *
 * Layout: ggml's, ne0 fastest, as ggml trainers and ggml_flash_attn_ext use it:
 *   q    [D,   Sq,  Hq,  B]   T            k [D,  Skv, Hkv, B] T       v [Dv, Skv, Hkv, B] T
 *        T = F32, F16 or BF16, one type for all three (fattn's F32, F16, BF16 dtypes; the CPU
 *        computes in f32 from the 16-bit values, fattn's PREC_AUTO -> F32)
 *   mask [Skv, Sq', Hm,  Bm]  F32, F16 or BF16, additive (-INFINITY masks a key), Sq' >= Sq (the first
 *        Sq rows are used, as ggml_soft_max_ext does), Hm = 1 or Hq, Bm = 1 or B (1 broadcasts)
 *   o    [Dv,  Sq,  Hq,  B]   F32, contiguous (what fattn_ggml_attn returns); for 16-bit q, k, v
 *        it holds fattn's T-rounded O (fattn's outputs have q's dtype), widened to F32
 *   lse  [Sq,  Hq,  B]        F32, natural log of each row's softmax denominator
 * Any byte strides whose head-dim stride nb[0] is the element size: a permuted or strided view
 * (q out of a fused QKV projection) is read in place, never ggml_cont-ed.
 * GQA / MQA: Hq % Hkv == 0, query head h reads kv head h / (Hq / Hkv). Skv may differ from Sq.
 *
 * Storage: the op's node is one F32 tensor holding O then LSE ([Dv*Sq*Hq*B + Sq*Hq*B]);
 * fattn_ggml_attn returns the O part as a contiguous view and fattn_ggml_attn_lse the LSE part.
 * The LSE view carries no gradient: a loss term on it is ignored by the backward.
 * No gradient flows to the mask (fattn's contract, §3 of docs/CONTRACT.md).
 * Gradients dq, dk, dv are F32 whatever T is, as every gradient ggml's backward builds (its loss
 * and ggml-opt's accumulators are F32; a ggml_cast's backward passes the F32 gradient on). For a
 * 16-bit T fattn's backward reads dO rounded to T and writes dq, dk, dv in T (fattn's outputs have
 * q's dtype), which the op widens to F32; the T copies of O, dO and the gradients live in the
 * backward node (it is [n_q + n_k + n_v + n_o] F32 then, against [n_q + n_k + n_v] for F32).
 * BF16 sources need patches/0002 (ggml's backward otherwise asserts F32 or F16 sources).
 *
 * Threads: the op runs fattn's CPU kernels on the ggml threads computing the graph (fattn's
 * parallel loops are handed to them): no second thread pool. Results are bitwise the same for
 * any thread count.
 *
 * Errors: a graph-building call never aborts or prints; on bad input it returns NULL (or a
 * status) and fattn_ggml_last_error() names the argument and the rule. A failure while the graph
 * computes (not expected once fattn_ggml_attn accepted the shapes) fills the op's output with
 * NaN and is reported by fattn_ggml_compute_error().
 */
#ifndef FATTN_GGML_H
#define FATTN_GGML_H

#include <stddef.h>

#include "fattn/fattn.h"
#include "ggml-backend.h"
#include "ggml.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Attention forward, differentiable. scale 0 = 1/sqrt(D). causal: FATTN_CAUSAL_NONE, _TOP_LEFT
 * (key j = i is the diagonal) or _BOTTOM_RIGHT (j = i + Skv - Sq: the last query sees the last
 * key; ggml_diag_mask_inf with n_past = Skv - Sq). prec: FATTN_PREC_AUTO, _F32, _TF32 or _NATIVE
 * (TF32 and NATIVE need a backend that runs them; the CPU answers FATTN_ERR_UNSUPPORTED).
 * Returns o, or NULL. Windows and varlen: fattn_ggml_attn_ex. */
struct ggml_tensor * fattn_ggml_attn(struct ggml_context * ctx, struct ggml_tensor * q,
                                     struct ggml_tensor * k, struct ggml_tensor * v,
                                     struct ggml_tensor * mask, float scale, fattn_causal causal,
                                     fattn_prec prec);

/* Everything fattn_ggml_attn takes, plus sliding windows and varlen (packed sequences), as
 * fattn_attn_params has them. fattn_ggml_attn_opts_default(): no mask, scale 0, no causal mask,
 * prec AUTO, unbounded window (-1, -1, TOP_LEFT), dense (no cu_seqlens).
 *   window: key j is allowed for query i when diag - window_left <= j <= diag + window_right,
 *     diag = i (FATTN_ALIGN_TOP_LEFT) or i + Skv - Sq (FATTN_ALIGN_BOTTOM_RIGHT), -1 = unbounded;
 *     with causal, window_right must be -1 or 0 and window_align the causal diagonal (fattn's
 *     rules, answered by fattn_attn_supports).
 *   varlen: cu_seqlens_q, cu_seqlens_kv are I32 tensors [num_seqs + 1] (contiguous, CPU memory,
 *     both or neither; may be the same tensor) of offsets into the packed token dim: q, k, v have
 *     B = 1 and Sq / Skv = total tokens; sequence s is tokens [cu[s], cu[s+1]); tokens attend
 *     only within their sequence and masks (causal, window) apply per sequence; a mask is indexed
 *     by packed positions, [total_kv, total_q', Hm, 1]. The offsets are graph data, read when the
 *     graph computes (set them per batch, e.g. under ggml-opt's static graphs): graph-building
 *     calls check the tensors' type and shape, and fattn checks the contents (start 0,
 *     non-decreasing, last = the tokens of q / k) at compute time; bad contents fill the output
 *     with NaN and are reported by fattn_ggml_compute_error(). No gradient flows to them. */
typedef struct fattn_ggml_attn_opts {
    struct ggml_tensor * mask;          /* additive mask as for fattn_ggml_attn, or NULL */
    float                scale;         /* 0 = 1/sqrt(D) */
    fattn_causal         causal;
    fattn_prec           prec;
    int64_t              window_left;   /* -1 = unbounded */
    int64_t              window_right;  /* -1 = unbounded */
    fattn_align          window_align;
    struct ggml_tensor * cu_seqlens_q;  /* I32 [num_seqs + 1] or NULL (dense) */
    struct ggml_tensor * cu_seqlens_kv; /* I32 [num_seqs + 1], with cu_seqlens_q */
} fattn_ggml_attn_opts;

fattn_ggml_attn_opts fattn_ggml_attn_opts_default(void);

/* fattn_ggml_attn with opts (NULL = the defaults). Returns o, or NULL. */
struct ggml_tensor * fattn_ggml_attn_ex(struct ggml_context * ctx, struct ggml_tensor * q,
                                        struct ggml_tensor * k, struct ggml_tensor * v,
                                        const fattn_ggml_attn_opts * opts);

/* The LSE [Sq, Hq, B] of an o returned by fattn_ggml_attn (a view; no gradient). NULL if o is
 * not such a tensor. */
struct ggml_tensor * fattn_ggml_attn_lse(struct ggml_context * ctx, struct ggml_tensor * o);

/* 1 if t is an o returned by fattn_ggml_attn, else 0. */
int fattn_ggml_is_attn(const struct ggml_tensor * t);

/* The precision the op runs (never AUTO): log this, not the request. FATTN_PREC_AUTO if o is
 * not an fattn_ggml_attn output. */
fattn_prec fattn_ggml_attn_prec(const struct ggml_tensor * o);

/* The backward as explicit ops, for a graph built by hand (ggml_build_backward_expand calls the
 * same thing through the hook): grad_o [Dv, Sq, Hq, B] F32 (any strides, nb[0] = 4; rounded to
 * q's type for 16-bit inputs); dq, dk, dv get F32 views shaped like q, k, v (contiguous).
 * Returns FATTN_OK or a status. */
fattn_status fattn_ggml_attn_back(struct ggml_context * ctx, struct ggml_tensor * o,
                                  struct ggml_tensor * grad_o, struct ggml_tensor ** dq,
                                  struct ggml_tensor ** dk, struct ggml_tensor ** dv);

/* Would fattn_ggml_attn accept and run these tensors (their shapes, types and strides; data may
 * be unallocated)? FATTN_OK, or the status of the first rule broken with the reason in why (may
 * be NULL). Answered by fattn_attn_supports() of a CPU context at these shapes plus the ggml-side
 * rules (types, layouts, mask shape): ask it once, at start-up. */
fattn_status fattn_ggml_attn_supports(const struct ggml_tensor * q, const struct ggml_tensor * k,
                                      const struct ggml_tensor * v, const struct ggml_tensor * mask,
                                      float scale, fattn_causal causal, fattn_prec prec,
                                      char * why, size_t why_len);

/* fattn_ggml_attn_supports with opts (NULL = the defaults). Varlen: answered for offsets of the
 * tensors' num_seqs (one sequence of all tokens); the contents are checked when computing. */
fattn_status fattn_ggml_attn_supports_ex(const struct ggml_tensor * q, const struct ggml_tensor * k,
                                         const struct ggml_tensor * v,
                                         const fattn_ggml_attn_opts * opts, char * why,
                                         size_t why_len);

/* fattn's memory model (fattn_attn_memory(), docs/CONTRACT.md §6) for one op at these shapes. */
fattn_status fattn_ggml_attn_memory(const struct ggml_tensor * q, const struct ggml_tensor * k,
                                    const struct ggml_tensor * v, const struct ggml_tensor * mask,
                                    float scale, fattn_causal causal, fattn_prec prec,
                                    fattn_attn_memory_info * out);
fattn_status fattn_ggml_attn_memory_ex(const struct ggml_tensor * q, const struct ggml_tensor * k,
                                       const struct ggml_tensor * v,
                                       const fattn_ggml_attn_opts * opts,
                                       fattn_attn_memory_info * out);

/* The fattn nodes of graph (forward and backward) that backend would not run: FATTN_OK when it
 * takes them all, else FATTN_ERR_UNSUPPORTED with the first such node named in why (may be
 * NULL). A ggml scheduler runs a node its backend refuses on the CPU, copying tensors there and
 * back; a trainer asks this at start-up, at its real shapes, and stops instead. CPU backend:
 * every node. CUDA backend (a FATTN_GGML_CUDA build, ggml patch 0003): F32 q, k, v where
 * fattn_attn_supports() of the device says yes; no PaTH node (fattn_ggml_path_attn). */
fattn_status fattn_ggml_graph_check(struct ggml_cgraph * graph, ggml_backend_t backend, char * why,
                                    size_t why_len);

/* The precision the op runs on CUDA device `device` (never AUTO; AUTO for f32 inputs resolves
 * to TF32 on sm_80+), or FATTN_PREC_AUTO if o is not an fattn_ggml_attn output or there is no
 * such device (or no CUDA in this build). */
fattn_prec fattn_ggml_attn_prec_cuda(const struct ggml_tensor * o, int device);

/* ------------------------------------------------------------------ PaTH attention
 * fattn's PaTH attention (docs/PATH.md: softmax attention whose scores walk the query back
 * through H_t = I - beta_t w_t w_t^T, with an optional log forget gate g) as a differentiable
 * ggml op, CPU backend. Layout (ne0 fastest), F32 throughout:
 *   q [K, T, Hq, B]   k [K, T, H, B]   v [V, T, H, B]   w [K, T, H, B]  (nb[0] = 4, any other
 *                     byte strides in whole elements: permuted views are read in place)
 *   beta [T, H, B]    g [T, Hq, B] (optional)           (any strides in whole elements)
 *   o [V, T, Hq, B]   (returned, contiguous)            lse [T, Hq, B] (fattn_ggml_path_lse)
 * GQA: Hq % H == 0 (w and beta belong to the kv head, g to the query head). K and V as the CPU
 * backend takes them (docs/PATH.md). Gradients flow to q, k, v, w, beta and g (F32); none to o's
 * LSE or to cu_seqlens.
 * Varlen: cu_seqlens, an I32 tensor [num_seqs + 1] of offsets into T (contiguous, CPU memory),
 * with B = 1; read when the graph computes, as fattn_ggml_attn_ex's offsets.
 * check: FATTN_PATH_CHECK_STRICT (default) refuses, when the graph computes, a token whose
 * | |w_t| - 1 | > check_tol (0 = 1e-3) or beta_t outside [0, 2] (normalize w, e.g. ggml_l2_norm,
 * and squash beta, e.g. 2 * sigmoid): the output is NaN and fattn_ggml_compute_error() names the
 * token. Threads, determinism, errors: as fattn_ggml_attn. The history layout is PACKED.
 * fattn_ggml_graph_check names PaTH nodes on any backend but the CPU's. */
typedef struct fattn_ggml_path_opts {
    struct ggml_tensor * g;           /* log forget gate [T, Hq, B], or NULL */
    float                scale;       /* 0 = 1/sqrt(K) */
    struct ggml_tensor * cu_seqlens;  /* I32 [num_seqs + 1], or NULL (dense) */
    fattn_path_check     check;       /* STRICT (default) or NONE */
    float                check_tol;   /* 0 = 1e-3 */
} fattn_ggml_path_opts;

fattn_ggml_path_opts fattn_ggml_path_opts_default(void);

/* PaTH attention forward, differentiable. opts NULL = the defaults. Returns o, or NULL. */
struct ggml_tensor * fattn_ggml_path_attn(struct ggml_context * ctx, struct ggml_tensor * q,
                                          struct ggml_tensor * k, struct ggml_tensor * v,
                                          struct ggml_tensor * w, struct ggml_tensor * beta,
                                          const fattn_ggml_path_opts * opts);

/* The LSE [T, Hq, B] of an o returned by fattn_ggml_path_attn (a view; no gradient). */
struct ggml_tensor * fattn_ggml_path_lse(struct ggml_context * ctx, struct ggml_tensor * o);

/* 1 if t is an o returned by fattn_ggml_path_attn, else 0. */
int fattn_ggml_is_path(const struct ggml_tensor * t);

/* Would fattn_ggml_path_attn accept these tensors (shapes, types, strides; data may be
 * unallocated)? FATTN_OK, or the first rule broken with the reason in why (may be NULL). */
fattn_status fattn_ggml_path_supports(const struct ggml_tensor * q, const struct ggml_tensor * k,
                                      const struct ggml_tensor * v, const struct ggml_tensor * w,
                                      const struct ggml_tensor * beta,
                                      const fattn_ggml_path_opts * opts, char * why,
                                      size_t why_len);

/* fattn's PaTH memory model (fattn_path_memory()) for one op at these shapes, computed by a graph
 * of n_threads threads (the CPU backend keeps one scratch slot per thread). Varlen: answered for
 * one sequence of all T tokens (the offsets are graph data); a packing of more, shorter
 * sequences has less history but more per-segment arrays: ask fattn_path_memory() with the real
 * offsets where the bound must hold for them. */
fattn_status fattn_ggml_path_memory(const struct ggml_tensor * q, const struct ggml_tensor * k,
                                    const struct ggml_tensor * v, const struct ggml_tensor * w,
                                    const struct ggml_tensor * beta,
                                    const fattn_ggml_path_opts * opts, int n_threads,
                                    fattn_path_memory_info * out);

/* Message of the calling thread's last failed fattn_ggml call ("" if none). */
const char * fattn_ggml_last_error(void);

/* Compute-time failures: returns the number of op computations that failed since the last call
 * (0 = none) and copies the first one's message into why (may be NULL); resets the count. */
int fattn_ggml_compute_error(char * why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif /* FATTN_GGML_H */
