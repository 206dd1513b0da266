/* robust_enums.c — calls the C API with out-of-range enum values, as any C caller may (an enum
 * is an int in C). Compiled as C so that forming these values is not itself undefined behaviour,
 * as it would be in the C++ tests; test_robust.cpp checks the statuses, and the sanitizer build
 * (UBSan, halt_on_error) checks that the library never loads such a value as its enum type. */
#include <stddef.h>
#include <string.h>

#include "fattn/fattn.h"

/* Each call's status (or 0/1 for functions that return a value), in this order:
 *  [0] fattn_status_string(99) is "unknown status"   [1] fattn_dtype_size(7) == 0
 *  [2] fattn_dtype_name(7) is "invalid"              [3] fattn_prec_name(9) is "invalid"
 *  [4] fattn_algo_name(5) is "invalid"
 *  [5] attn supports, q built by fattn_tensor_4d with dtype 7
 *  [6] attn supports, q built by fattn_tensor_contiguous with dtype 7
 *  [7] fattn_attn_workspace_size with dir 5          [8] fattn_attn_max_seqlen with dtype 9
 *  [9] fattn_attn_max_seqlen with algo 7             [10] fattn_path_workspace_size with dir 5
 *  [11] fattn_path_supports with history 7           [12] fattn_path_supports with check 9
 *  [13] fattn_path_supports, k dtype 7 (softmax: [5]) [14] fattn_resolve_prec, prec 42 (never AUTO) */
int fattn_test_enum_abuse(fattn_ctx_t *ctx, int out[15]) {
    static float buf[1 << 12];
    fattn_attn_params p = fattn_attn_params_default();
    fattn_tensor q = fattn_tensor_contiguous(buf, FATTN_F32, 1, 4, 2, 16);
    fattn_tensor k = q, v = q;
    size_t bytes = 0;
    int64_t max_s = 0;

    out[0] = strcmp(fattn_status_string((fattn_status)99), "unknown status") == 0;
    out[1] = fattn_dtype_size((fattn_dtype)7) == 0;
    out[2] = strcmp(fattn_dtype_name((fattn_dtype)7), "invalid") == 0;
    out[3] = strcmp(fattn_prec_name((fattn_prec)9), "invalid") == 0;
    out[4] = strcmp(fattn_algo_name((fattn_algo)5), "invalid") == 0;

    fattn_tensor bad = fattn_tensor_4d(buf, (fattn_dtype)7, 1, 4, 2, 16, 128, 32, 16, 1);
    out[5] = fattn_attn_supports(ctx, &p, &bad, &k, &v, NULL, 0);
    bad = fattn_tensor_contiguous(buf, (fattn_dtype)7, 1, 4, 2, 16);
    out[6] = fattn_attn_supports(ctx, &p, &bad, &k, &v, NULL, 0);
    out[7] = fattn_attn_workspace_size(ctx, &p, &q, &k, &v, (fattn_dir)5, &bytes);
    out[8] = fattn_attn_max_seqlen(ctx, &p, (fattn_dtype)9, 1, 2, 2, 16, 16, 1u << 30, &max_s);
    p.algo = (fattn_algo)7;
    out[9] = fattn_attn_max_seqlen(ctx, &p, FATTN_F32, 1, 2, 2, 16, 16, 1u << 30, &max_s);

    {
        /* PaTH: q [1, 4, 2, 16], k/v/w [1, 4, 2, 16], beta [1, 4, 2, 1] */
        fattn_path_params pp = fattn_path_params_default();
        fattn_tensor w = q, beta = fattn_tensor_contiguous(buf, FATTN_F32, 1, 4, 2, 1);
        fattn_path_workspace_info info;
        out[10] = fattn_path_workspace_size(ctx, &pp, &q, &k, &v, &w, &beta, NULL, (fattn_dir)5, &info);
        pp.history = (fattn_path_history)7;
        out[11] = fattn_path_supports(ctx, &pp, &q, &k, &v, &w, &beta, NULL, NULL, 0);
        pp = fattn_path_params_default();
        pp.check = (fattn_path_check)9;
        out[12] = fattn_path_supports(ctx, &pp, &q, &k, &v, &w, &beta, NULL, NULL, 0);
        pp = fattn_path_params_default();
        bad = fattn_tensor_contiguous(buf, (fattn_dtype)7, 1, 4, 2, 16);
        out[13] = fattn_path_supports(ctx, &pp, &q, &bad, &v, &w, &beta, NULL, NULL, 0);
    }
    p = fattn_attn_params_default();
    p.prec = (fattn_prec)42;
    out[14] = fattn_resolve_prec(ctx, &p, &q) != FATTN_PREC_AUTO;
    return 15;
}

/* fattn_ctx_set_cuda_family with family 7 (out of range): its status. */
int fattn_test_bad_cuda_family(fattn_ctx_t *ctx) { return fattn_ctx_set_cuda_family(ctx, (fattn_cuda_family)7); }
