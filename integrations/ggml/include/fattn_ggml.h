/*
 * fattn_ggml.h — fattn's exact attention as a differentiable ggml op (CPU backend).
 *
 * One call puts softmax attention in a ggml graph; ggml_build_backward_expand (ggml-opt too)
 * differentiates through it with fattn's fused backward, so a trainer never materialises the
 * [Skv, Sq, H] probabilities. Needs ggml with the custom-op backward hook
 * (ggml_custom_set_backward, patches/0001-ggml-custom-op-backward.patch of this folder).
 *
 * Layout: ggml's, ne0 fastest, as ggml trainers and ggml_flash_attn_ext use it:
 *   q    [D,   Sq,  Hq,  B]   F32          k [D,  Skv, Hkv, B] F32     v [Dv, Skv, Hkv, B] F32
 *   mask [Skv, Sq', Hm,  Bm]  F32 or F16, additive (-INFINITY masks a key), Sq' >= Sq (the first
 *        Sq rows are used, as ggml_soft_max_ext does), Hm = 1 or Hq, Bm = 1 or B (1 broadcasts)
 *   o    [Dv,  Sq,  Hq,  B]   F32, contiguous (what fattn_ggml_attn returns)
 *   lse  [Sq,  Hq,  B]        F32, natural log of each row's softmax denominator
 * Any byte strides whose head-dim stride nb[0] is the element size: a permuted or strided view
 * (q out of a fused QKV projection) is read in place, never ggml_cont-ed.
 * GQA / MQA: Hq % Hkv == 0, query head h reads kv head h / (Hq / Hkv). Skv may differ from Sq.
 *
 * Storage: the op's node is one F32 tensor holding O then LSE ([Dv*Sq*Hq*B + Sq*Hq*B]);
 * fattn_ggml_attn returns the O part as a contiguous view and fattn_ggml_attn_lse the LSE part.
 * The LSE view carries no gradient: a loss term on it is ignored by the backward.
 * No gradient flows to the mask (fattn's contract, §3 of docs/CONTRACT.md).
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
#include "ggml.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Attention forward, differentiable. scale 0 = 1/sqrt(D). causal: FATTN_CAUSAL_NONE, _TOP_LEFT
 * (key j = i is the diagonal) or _BOTTOM_RIGHT (j = i + Skv - Sq: the last query sees the last
 * key; ggml_diag_mask_inf with n_past = Skv - Sq). prec: FATTN_PREC_AUTO, _F32 or _TF32 (TF32
 * needs a backend that runs it; the CPU answers FATTN_ERR_UNSUPPORTED). Returns o, or NULL. */
struct ggml_tensor * fattn_ggml_attn(struct ggml_context * ctx, struct ggml_tensor * q,
                                     struct ggml_tensor * k, struct ggml_tensor * v,
                                     struct ggml_tensor * mask, float scale, fattn_causal causal,
                                     fattn_prec prec);

/* The LSE [Sq, Hq, B] of an o returned by fattn_ggml_attn (a view; no gradient). NULL if o is
 * not such a tensor. */
struct ggml_tensor * fattn_ggml_attn_lse(struct ggml_context * ctx, struct ggml_tensor * o);

/* 1 if t is an o returned by fattn_ggml_attn, else 0. */
int fattn_ggml_is_attn(const struct ggml_tensor * t);

/* The precision the op runs (never AUTO): log this, not the request. FATTN_PREC_AUTO if o is
 * not an fattn_ggml_attn output. */
fattn_prec fattn_ggml_attn_prec(const struct ggml_tensor * o);

/* The backward as explicit ops, for a graph built by hand (ggml_build_backward_expand calls the
 * same thing through the hook): grad_o [Dv, Sq, Hq, B] F32 (any strides, nb[0] = 4); dq, dk, dv
 * get views shaped like q, k, v (contiguous). Returns FATTN_OK or a status. */
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

/* fattn's memory model (fattn_attn_memory(), docs/CONTRACT.md §6) for one op at these shapes. */
fattn_status fattn_ggml_attn_memory(const struct ggml_tensor * q, const struct ggml_tensor * k,
                                    const struct ggml_tensor * v, const struct ggml_tensor * mask,
                                    float scale, fattn_causal causal, fattn_prec prec,
                                    fattn_attn_memory_info * out);

/* Message of the calling thread's last failed fattn_ggml call ("" if none). */
const char * fattn_ggml_last_error(void);

/* Compute-time failures: returns the number of op computations that failed since the last call
 * (0 = none) and copies the first one's message into why (may be NULL); resets the count. */
int fattn_ggml_compute_error(char * why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif /* FATTN_GGML_H */
