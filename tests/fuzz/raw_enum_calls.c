/* raw_enum_calls.c — the fuzz target's calls that pass a raw int where the C API takes an enum
 * by value. In C that is an ordinary call; in C++ forming the out-of-range enum value would
 * itself be undefined behaviour (and UBSan would flag the fuzz target, not the library). */
#include "fattn/fattn.h"

fattn_status fattn_fuzz_workspace_raw_dir(fattn_ctx_t *ctx, const fattn_attn_params *p,
                                          const fattn_tensor *q, const fattn_tensor *k,
                                          const fattn_tensor *v, int dir, size_t *bytes) {
    return fattn_attn_workspace_size(ctx, p, q, k, v, (fattn_dir)dir, bytes);
}

fattn_status fattn_fuzz_max_seqlen_raw_dtype(fattn_ctx_t *ctx, const fattn_attn_params *p, int dtype,
                                             int64_t B, int64_t Hq, int64_t Hkv, int64_t D, int64_t Dv,
                                             uint64_t budget, int64_t *max_s) {
    return fattn_attn_max_seqlen(ctx, p, (fattn_dtype)dtype, B, Hq, Hkv, D, Dv, budget, max_s);
}
