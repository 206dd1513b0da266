/* consumer.c — links an installed fattn from C99: checks the version and runs a small forward. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fattn/fattn.h"

#define STR2(x) #x
#define STR(x) STR2(x)

int main(void) {
    enum { B = 1, S = 8, H = 2, D = 16 };
    static float q[B * S * H * D], o[B * S * H * D], lse[B * H * S];
    fattn_ctx_t *ctx = NULL;
    fattn_attn_params p = fattn_attn_params_default();
    fattn_tensor tq, to, tl;
    const char *want = STR(FATTN_VERSION_MAJOR) "." STR(FATTN_VERSION_MINOR) "." STR(FATTN_VERSION_PATCH);
    int i;
    fattn_status s;

    if (strcmp(fattn_version(), want) != 0) {
        fprintf(stderr, "header says %s, library says %s\n", want, fattn_version());
        return 1;
    }
    for (i = 0; i < B * S * H * D; ++i) q[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    if (fattn_ctx_init_cpu(1, &ctx) != FATTN_OK) return 1;
    tq = fattn_tensor_contiguous(q, FATTN_F32, B, S, H, D);
    to = fattn_tensor_contiguous(o, FATTN_F32, B, S, H, D);
    tl = fattn_tensor_contiguous(lse, FATTN_F32, B, H, S, 1);
    s = fattn_attn_fwd(ctx, &p, &tq, &tq, &tq, &to, &tl, NULL, NULL, 0);
    if (s != FATTN_OK) {
        fprintf(stderr, "fwd: %s: %s\n", fattn_status_string(s), fattn_ctx_last_error(ctx));
        return 1;
    }
    fattn_ctx_free(ctx);
    for (i = 0; i < B * H * S; ++i)
        if (!isfinite(lse[i])) return 1;
    printf("consumer: fattn %s, lse[0] = %.6f\n", fattn_version(), lse[0]);
    return 0;
}
