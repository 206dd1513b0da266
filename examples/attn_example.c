/*
 * attn_example.c — a minimal C99 forward + backward of causal softmax attention on the CPU.
 *
 *   cc -std=c99 attn_example.c $(pkg-config --cflags --libs fattn) -o attn_example && ./attn_example
 *
 * Shows the lifecycle of DESIGN §2: make a context, describe the params, ask supports() with the
 * real shapes (fail loudly at init, never fall back), log the *resolved* precision, size the
 * workspace, run forward then backward, check every status. Exits non-zero on any failure,
 * including a result check: with causal masking, query 0 sees only key 0, so o[0] = v[0].
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "fattn/fattn.h"

enum { B = 2, S = 16, HQ = 4, HKV = 2, D = 32 }; /* GQA: 2 query heads per kv head */

#define CHECK(call)                                                                           \
    do {                                                                                      \
        fattn_status s_ = (call);                                                             \
        if (s_ != FATTN_OK) {                                                                 \
            fprintf(stderr, "%s failed: %s: %s\n", #call, fattn_status_string(s_),            \
                    fattn_ctx_last_error(ctx));                                               \
            return 1;                                                                         \
        }                                                                                     \
    } while (0)

static float *alloc_filled(size_t n, unsigned *seed) {
    float *p = (float *)malloc(n * sizeof(float));
    size_t i;
    if (!p) return NULL;
    for (i = 0; i < n; ++i) { /* small LCG: reproducible values in [-1, 1) */
        *seed = *seed * 1664525u + 1013904223u;
        p[i] = (float)((*seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    return p;
}

int main(void) {
    fattn_ctx_t *ctx = NULL;
    unsigned seed = 42;
    const size_t nq = (size_t)B * S * HQ * D, nkv = (size_t)B * S * HKV * D;
    float *q = alloc_filled(nq, &seed), *k = alloc_filled(nkv, &seed), *v = alloc_filled(nkv, &seed);
    float *o = alloc_filled(nq, &seed), *lse = alloc_filled((size_t)B * HQ * S, &seed);
    float *dout = alloc_filled(nq, &seed), *dq = alloc_filled(nq, &seed);
    float *dk = alloc_filled(nkv, &seed), *dv = alloc_filled(nkv, &seed);
    fattn_attn_params p;
    fattn_tensor tq, tk, tv, to, tl, tdo, tdq, tdk, tdv;
    char why[256];
    size_t ws_fwd = 0, ws_bwd = 0, saved = 0;
    double err = 0.0, gnorm = 0.0;
    size_t i;
    int h, d;

    if (!q || !k || !v || !o || !lse || !dout || !dq || !dk || !dv) return 1;
    printf("fattn %s\n", fattn_version());
    CHECK(fattn_ctx_init_cpu(2, &ctx));

    /* Views: logical [B, S, H, D], element strides, innermost stride 1. */
    tq = fattn_tensor_contiguous(q, FATTN_F32, B, S, HQ, D);
    tk = fattn_tensor_contiguous(k, FATTN_F32, B, S, HKV, D);
    tv = fattn_tensor_contiguous(v, FATTN_F32, B, S, HKV, D);
    to = fattn_tensor_contiguous(o, FATTN_F32, B, S, HQ, D);
    tl = fattn_tensor_contiguous(lse, FATTN_F32, B, HQ, S, 1); /* lse: [B, Hq, Sq] */
    tdo = fattn_tensor_contiguous(dout, FATTN_F32, B, S, HQ, D);
    tdq = fattn_tensor_contiguous(dq, FATTN_F32, B, S, HQ, D);
    tdk = fattn_tensor_contiguous(dk, FATTN_F32, B, S, HKV, D);
    tdv = fattn_tensor_contiguous(dv, FATTN_F32, B, S, HKV, D);

    p = fattn_attn_params_default(); /* scale 1/sqrt(D), no masks, prec AUTO, algo FUSED */
    p.causal = FATTN_CAUSAL_BOTTOM_RIGHT;

    if (fattn_attn_supports(ctx, &p, &tq, &tk, &tv, why, sizeof why) != FATTN_OK) {
        fprintf(stderr, "unsupported: %s\n", why);
        return 1;
    }
    printf("attn prec: %s (requested %s), algo %s\n",
           fattn_prec_name(fattn_resolve_prec(ctx, &p, &tq)), fattn_prec_name(p.prec),
           fattn_algo_name(p.algo));
    CHECK(fattn_attn_workspace_size(ctx, &p, &tq, &tk, &tv, FATTN_DIR_FWD, &ws_fwd));
    CHECK(fattn_attn_workspace_size(ctx, &p, &tq, &tk, &tv, FATTN_DIR_BWD, &ws_bwd));
    CHECK(fattn_attn_saved_size(ctx, &p, &tq, &tk, &tv, &saved)); /* 0 for FUSED */
    printf("workspace fwd %zu B, bwd %zu B, saved %zu B\n", ws_fwd, ws_bwd, saved);

    /* workspace NULL: the context allocates it; saved NULL is fine when saved_size is 0. */
    CHECK(fattn_attn_fwd(ctx, &p, &tq, &tk, &tv, &to, &tl, NULL, NULL, 0));
    CHECK(fattn_attn_bwd(ctx, &p, &tq, &tk, &tv, &to, &tl, NULL, &tdo, &tdq, &tdk, &tdv, NULL, 0));

    /* Row 0 of every (batch, head) sees only key 0: o = v of that key (its kv head h / 2). */
    for (i = 0; i < B; ++i)
        for (h = 0; h < HQ; ++h)
            for (d = 0; d < D; ++d) {
                float got = o[((i * S + 0) * HQ + h) * D + d];
                float want = v[((i * S + 0) * HKV + h / (HQ / HKV)) * D + d];
                double e = fabs((double)got - (double)want);
                if (e > err) err = e;
            }
    for (i = 0; i < nq; ++i) gnorm += (double)dq[i] * dq[i];
    printf("max |o[0] - v[0]| = %.3g, |dq| = %.4g\n", err, sqrt(gnorm));
    fattn_ctx_free(ctx);
    free(q); free(k); free(v); free(o); free(lse); free(dout); free(dq); free(dk); free(dv);
    if (err > 1e-6 || !(gnorm > 0.0) || !isfinite(gnorm)) {
        fprintf(stderr, "result check failed\n");
        return 1;
    }
    printf("ok\n");
    return 0;
}
