/*
 * ring_nccl.c — context-parallel (sequence-sharded) exact attention for a C engine, with NCCL
 * and fattn's C API. One process drives N GPUs (ncclCommInitAll); rank r owns GPU r and the
 * r-th contiguous S/N slice of q, k, v (and of dout).
 *
 *   forward   all-gather K and V; for every key block j in order 0, 1, ...: fattn_attn_fwd of
 *             the local queries against block j -> (o_j, lse_j), f32; fattn_attn_merge of the
 *             blocks in block order -> the rank's global o and lse.
 *   backward  for every key block j: fattn_attn_bwd with the GLOBAL o and lse (algo FUSED: it
 *             recomputes P = exp(s - lse) and uses delta = rowsum(o * dout), so its outputs are
 *             exactly block j's terms of the full gradient) -> dq_j (summed into dq in block
 *             order), dk_j, dv_j (sent to block j's owner). Every owner receives the N
 *             contributions to its dK/dV with ncclSend/ncclRecv and sums them in rank order
 *             0, 1, ..., N-1 (cublasSaxpy, element-wise): a fixed order chosen here, so the bits
 *             depend on nothing NCCL picks (algorithm, protocol, channels).
 *   causal    (default) the global causal mask over contiguous shards: block j < r is full (no
 *             mask), block r is causal on the local square (TOP_LEFT), blocks j > r are skipped
 *             (not computed, not merged, zero dK/dV contribution). Simple, not load-balanced (the
 *             zigzag layout of docs/RING.md balances it).
 *
 * The program then checks itself against fattn on one GPU over the whole sequence (o, dq, dk,
 * dv, relative max error) and runs the ring twice to check that the results are bitwise
 * repeatable. Inputs are f32 at precision F32 by default (--tf32: FATTN_PREC_AUTO, TF32 on
 * sm_80+, looser tolerance).
 *
 *   ring_nccl [--gpus N] [--batch B] [--seq S] [--heads H] [--dim D] [--no-causal] [--tf32]
 *
 * Prints one summary line per check and "ring_nccl: OK"; exits 1 on a failed check, 2 on an
 * error (a fattn, CUDA, NCCL or cuBLAS status, printed with its message). Needs N >= 1 GPUs and
 * S divisible by N. Built only when NCCL is found (docs/RING.md, "For C engines").
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "fattn/fattn.h"

#define MAX_GPUS 64

static void die_cuda(cudaError_t e, const char *what, int line) {
    fprintf(stderr, "ring_nccl: line %d: %s: %s\n", line, what, cudaGetErrorString(e));
    exit(2);
}
#define CUDA(x)                                  \
    do {                                         \
        cudaError_t e_ = (x);                    \
        if (e_ != cudaSuccess) die_cuda(e_, #x, __LINE__); \
    } while (0)
#define NCCL(x)                                                                          \
    do {                                                                                 \
        ncclResult_t r_ = (x);                                                           \
        if (r_ != ncclSuccess) {                                                         \
            fprintf(stderr, "ring_nccl: line %d: %s: %s\n", __LINE__, #x, ncclGetErrorString(r_)); \
            exit(2);                                                                     \
        }                                                                                \
    } while (0)
#define CUBLAS(x)                                                                        \
    do {                                                                                 \
        cublasStatus_t s_ = (x);                                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                               \
            fprintf(stderr, "ring_nccl: line %d: %s: cublas status %d\n", __LINE__, #x, (int)s_); \
            exit(2);                                                                     \
        }                                                                                \
    } while (0)
#define FATTN(ctx, x)                                                                    \
    do {                                                                                 \
        fattn_status s_ = (x);                                                           \
        if (s_ != FATTN_OK) {                                                            \
            fprintf(stderr, "ring_nccl: line %d: %s: %s: %s\n", __LINE__, #x,            \
                    fattn_status_string(s_), fattn_ctx_last_error(ctx));                 \
            exit(2);                                                                     \
        }                                                                                \
    } while (0)

typedef struct Config {
    int world;
    int64_t B, S, H, D;
    int causal;
    fattn_prec prec;
} Config;

/* Everything one rank (GPU) holds. Shapes: a "shard" is [B, Sl, H, D] f32 (Sl = S / world),
 * "stacked" buffers hold world shards one after the other, lse is [B, H, Sl]. */
typedef struct Rank {
    int dev;
    cudaStream_t st;
    fattn_ctx_t *ctx;
    cublasHandle_t blas;
    float *q, *k, *v, *dout;           /* this rank's shard */
    float *kg, *vg;                    /* gathered K, V: block j = shard of rank j */
    float *o_parts, *lse_parts;        /* per-block partials (world of each) */
    float *o, *lse;                    /* merged: the global o and lse of this rank's rows */
    float *dq, *dq_tmp;                /* dq accumulator, one block's dq */
    float *dk_send, *dv_send;          /* block j's dK/dV contribution, slot j */
    float *dk_recv, *dv_recv;          /* every rank's contribution to this rank's block, slot r */
    float *dk, *dv;                    /* summed in rank order */
} Rank;

static size_t shard_elems(const Config *c) {
    return (size_t)(c->B * (c->S / c->world) * c->H * c->D);
}

static fattn_tensor shard_view(float *p, const Config *c, int64_t sl) {
    return fattn_tensor_contiguous(p, FATTN_F32, c->B, sl, c->H, c->D);
}

static fattn_tensor lse_view(float *p, const Config *c, int64_t sl) {
    return fattn_tensor_contiguous(p, FATTN_F32, c->B, c->H, sl, 1);
}

static float *dev_alloc(size_t elems) {
    void *p = NULL;
    CUDA(cudaMalloc(&p, elems * sizeof(float) + 16));
    return (float *)p;
}

/* y += x over n floats (cuBLAS saxpy, alpha = 1: one rounding per element, in order). */
static void add_into(Rank *r, float *y, const float *x, size_t n) {
    const float one = 1.0f;
    while (n > 0) {
        const int m = n > (size_t)1 << 30 ? 1 << 30 : (int)n;
        CUBLAS(cublasSaxpy(r->blas, m, &one, x, 1, y, 1));
        x += m, y += m, n -= (size_t)m;
    }
}

/* What block j (rank j's keys) means for rank r's queries. 0: skipped (no key visible). */
static int block_params(const Config *c, int r, int j, fattn_attn_params *p) {
    *p = fattn_attn_params_default();
    p->prec = c->prec;
    if (!c->causal) return 1;
    if (j > r) return 0;                         /* keys after every local query */
    if (j == r) p->causal = FATTN_CAUSAL_TOP_LEFT; /* the diagonal block, Sq == Skv */
    return 1;
}

/* The ring step (forward + backward) over all ranks; results in ranks[r].o, lse, dq, dk, dv. */
static void ring_step(const Config *c, Rank *ranks, ncclComm_t *comms) {
    const int N = c->world;
    const int64_t sl = c->S / N;
    const size_t n = shard_elems(c), nl = (size_t)(c->B * c->H * sl);

    /* ---- forward: all-gather K, V ---- */
    NCCL(ncclGroupStart());
    for (int r = 0; r < N; ++r) {
        NCCL(ncclAllGather(ranks[r].k, ranks[r].kg, n, ncclFloat32, comms[r], ranks[r].st));
        NCCL(ncclAllGather(ranks[r].v, ranks[r].vg, n, ncclFloat32, comms[r], ranks[r].st));
    }
    NCCL(ncclGroupEnd());

    /* ---- forward: one partial per visible block, merged in block order ---- */
    for (int r = 0; r < N; ++r) {
        Rank *R = &ranks[r];
        CUDA(cudaSetDevice(R->dev));
        fattn_tensor q = shard_view(R->q, c, sl);
        fattn_tensor o_parts[MAX_GPUS], lse_parts[MAX_GPUS];
        int64_t np = 0;
        for (int j = 0; j < N; ++j) {
            fattn_attn_params p;
            if (!block_params(c, r, j, &p)) continue;
            fattn_tensor k = shard_view(R->kg + (size_t)j * n, c, sl);
            fattn_tensor v = shard_view(R->vg + (size_t)j * n, c, sl);
            o_parts[np] = shard_view(R->o_parts + (size_t)np * n, c, sl);
            lse_parts[np] = lse_view(R->lse_parts + (size_t)np * nl, c, sl);
            FATTN(R->ctx, fattn_attn_fwd(R->ctx, &p, &q, &k, &v, &o_parts[np], &lse_parts[np],
                                         NULL, NULL, 0));
            ++np;
        }
        fattn_tensor o = shard_view(R->o, c, sl), lse = lse_view(R->lse, c, sl);
        FATTN(R->ctx, fattn_attn_merge(R->ctx, np, o_parts, lse_parts, &o, &lse));
    }

    /* ---- backward: per block with the global o, lse ---- */
    for (int r = 0; r < N; ++r) {
        Rank *R = &ranks[r];
        CUDA(cudaSetDevice(R->dev));
        fattn_tensor q = shard_view(R->q, c, sl), g = shard_view(R->dout, c, sl);
        fattn_tensor o = shard_view(R->o, c, sl), lse = lse_view(R->lse, c, sl);
        int first = 1;
        for (int j = 0; j < N; ++j) {
            fattn_attn_params p;
            float *dk_j = R->dk_send + (size_t)j * n, *dv_j = R->dv_send + (size_t)j * n;
            if (!block_params(c, r, j, &p)) {
                CUDA(cudaMemsetAsync(dk_j, 0, n * sizeof(float), R->st));
                CUDA(cudaMemsetAsync(dv_j, 0, n * sizeof(float), R->st));
                continue;
            }
            fattn_tensor k = shard_view(R->kg + (size_t)j * n, c, sl);
            fattn_tensor v = shard_view(R->vg + (size_t)j * n, c, sl);
            fattn_tensor dk = shard_view(dk_j, c, sl), dv = shard_view(dv_j, c, sl);
            fattn_tensor dq = shard_view(first ? R->dq : R->dq_tmp, c, sl);
            FATTN(R->ctx, fattn_attn_bwd(R->ctx, &p, &q, &k, &v, &o, &lse, NULL, &g, &dq, &dk,
                                         &dv, NULL, 0));
            if (!first) add_into(R, R->dq, R->dq_tmp, n); /* dq = dq_0 + dq_1 + ... in order */
            first = 0;
        }
    }

    /* ---- dK/dV: every rank sends block j's contribution to rank j (an all-to-all) ---- */
    NCCL(ncclGroupStart());
    for (int r = 0; r < N; ++r)
        for (int j = 0; j < N; ++j) {
            Rank *R = &ranks[r];
            NCCL(ncclSend(R->dk_send + (size_t)j * n, n, ncclFloat32, j, comms[r], R->st));
            NCCL(ncclSend(R->dv_send + (size_t)j * n, n, ncclFloat32, j, comms[r], R->st));
            NCCL(ncclRecv(R->dk_recv + (size_t)j * n, n, ncclFloat32, j, comms[r], R->st));
            NCCL(ncclRecv(R->dv_recv + (size_t)j * n, n, ncclFloat32, j, comms[r], R->st));
        }
    NCCL(ncclGroupEnd());

    /* ---- the owner sums the contributions in rank order 0, 1, ..., N-1 ---- */
    for (int r = 0; r < N; ++r) {
        Rank *R = &ranks[r];
        CUDA(cudaSetDevice(R->dev));
        CUDA(cudaMemcpyAsync(R->dk, R->dk_recv, n * sizeof(float), cudaMemcpyDeviceToDevice, R->st));
        CUDA(cudaMemcpyAsync(R->dv, R->dv_recv, n * sizeof(float), cudaMemcpyDeviceToDevice, R->st));
        for (int s = 1; s < N; ++s) {
            add_into(R, R->dk, R->dk_recv + (size_t)s * n, n);
            add_into(R, R->dv, R->dv_recv + (size_t)s * n, n);
        }
    }
    for (int r = 0; r < N; ++r) {
        CUDA(cudaSetDevice(ranks[r].dev));
        CUDA(cudaStreamSynchronize(ranks[r].st));
    }
}

/* ---------------------------------------------------------------- host data and checks */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float rnd(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Rank r's slice [B, Sl, H, D] of a global [B, S, H, D] host array, or back (to_global). */
static void slice(const Config *c, float *global, float *shard, int r, int to_global) {
    const int64_t sl = c->S / c->world, row = c->H * c->D;
    for (int64_t b = 0; b < c->B; ++b)
        for (int64_t t = 0; t < sl; ++t) {
            float *g = global + ((size_t)(b * c->S + r * sl + t)) * (size_t)row;
            float *s = shard + ((size_t)(b * sl + t)) * (size_t)row;
            if (to_global) memcpy(g, s, (size_t)row * sizeof(float));
            else memcpy(s, g, (size_t)row * sizeof(float));
        }
}

static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= num)) num = d; /* NaN too */
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return num / (den > 0 ? den : 1e-30);
}

static int parse(int argc, char **argv, Config *c) {
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        const int more = i + 1 < argc;
        if (!strcmp(a, "--gpus") && more) c->world = atoi(argv[++i]);
        else if (!strcmp(a, "--batch") && more) c->B = atoll(argv[++i]);
        else if (!strcmp(a, "--seq") && more) c->S = atoll(argv[++i]);
        else if (!strcmp(a, "--heads") && more) c->H = atoll(argv[++i]);
        else if (!strcmp(a, "--dim") && more) c->D = atoll(argv[++i]);
        else if (!strcmp(a, "--no-causal")) c->causal = 0;
        else if (!strcmp(a, "--tf32")) c->prec = FATTN_PREC_AUTO;
        else {
            fprintf(stderr, "usage: ring_nccl [--gpus N] [--batch B] [--seq S] [--heads H] "
                            "[--dim D] [--no-causal] [--tf32]\n");
            return 0;
        }
    }
    return 1;
}

int main(int argc, char **argv) {
    Config c = {0, 2, 1024, 4, 64, 1, FATTN_PREC_F32};
    int ndev = 0;
    if (!parse(argc, argv, &c)) return 2;
    CUDA(cudaGetDeviceCount(&ndev));
    if (c.world <= 0) c.world = ndev;
    if (c.world < 1 || c.world > ndev || c.world > MAX_GPUS) {
        fprintf(stderr, "ring_nccl: --gpus %d, but %d GPUs are visible (at most %d)\n", c.world, ndev,
                MAX_GPUS);
        return 2;
    }
    if (c.B < 1 || c.H < 1 || c.D < 1 || c.S < c.world || c.S % c.world != 0) {
        fprintf(stderr, "ring_nccl: need B, H, D >= 1 and S (%lld) a multiple of the GPU count (%d)\n",
                (long long)c.S, c.world);
        return 2;
    }
    const int N = c.world;
    const int64_t sl = c.S / N;
    const size_t n = shard_elems(&c), nl = (size_t)(c.B * c.H * sl), nf = n * (size_t)N;

    /* Global inputs on the host, [B, S, H, D]. */
    float *hq = malloc(nf * 4), *hk = malloc(nf * 4), *hv = malloc(nf * 4), *hg = malloc(nf * 4);
    float *hshard = malloc(n * 4);
    if (!hq || !hk || !hv || !hg || !hshard) {
        fprintf(stderr, "ring_nccl: out of host memory\n");
        return 2;
    }
    for (size_t i = 0; i < nf; ++i) hq[i] = rnd(), hk[i] = rnd(), hv[i] = rnd(), hg[i] = rnd();

    /* One rank per GPU: stream, fattn CUDA context, cuBLAS handle, buffers. */
    Rank ranks[MAX_GPUS];
    ncclComm_t comms[MAX_GPUS];
    int devs[MAX_GPUS];
    memset(ranks, 0, sizeof ranks);
    for (int r = 0; r < N; ++r) {
        Rank *R = &ranks[r];
        R->dev = devs[r] = r;
        CUDA(cudaSetDevice(r));
        CUDA(cudaStreamCreateWithFlags(&R->st, cudaStreamNonBlocking));
        fattn_status s = fattn_ctx_init_cuda(r, R->st, &R->ctx);
        if (s != FATTN_OK) {
            fprintf(stderr, "ring_nccl: fattn_ctx_init_cuda(%d): %s: %s\n", r, fattn_status_string(s),
                    fattn_ctx_last_error(NULL));
            return 2;
        }
        CUBLAS(cublasCreate(&R->blas));
        CUBLAS(cublasSetStream(R->blas, R->st));
        R->q = dev_alloc(n), R->k = dev_alloc(n), R->v = dev_alloc(n), R->dout = dev_alloc(n);
        R->kg = dev_alloc(nf), R->vg = dev_alloc(nf);
        R->o_parts = dev_alloc(nf), R->lse_parts = dev_alloc(nl * (size_t)N);
        R->o = dev_alloc(n), R->lse = dev_alloc(nl);
        R->dq = dev_alloc(n), R->dq_tmp = dev_alloc(n);
        R->dk_send = dev_alloc(nf), R->dv_send = dev_alloc(nf);
        R->dk_recv = dev_alloc(nf), R->dv_recv = dev_alloc(nf);
        R->dk = dev_alloc(n), R->dv = dev_alloc(n);
        float *src[4] = {hq, hk, hv, hg}, *dst[4] = {R->q, R->k, R->v, R->dout};
        for (int t = 0; t < 4; ++t) {
            slice(&c, src[t], hshard, r, 0);
            CUDA(cudaMemcpy(dst[t], hshard, n * 4, cudaMemcpyHostToDevice));
        }
    }
    NCCL(ncclCommInitAll(comms, N, devs));

    /* Run the ring twice; keep the first run's results on the host. */
    float *ring[2][4];
    for (int run = 0; run < 2; ++run) {
        ring_step(&c, ranks, comms);
        for (int t = 0; t < 4; ++t) {
            ring[run][t] = malloc(nf * 4);
            if (!ring[run][t]) return 2;
        }
        for (int r = 0; r < N; ++r) {
            float *src[4] = {ranks[r].o, ranks[r].dq, ranks[r].dk, ranks[r].dv};
            CUDA(cudaSetDevice(ranks[r].dev));
            for (int t = 0; t < 4; ++t) {
                CUDA(cudaMemcpy(hshard, src[t], n * 4, cudaMemcpyDeviceToHost));
                slice(&c, ring[run][t], hshard, r, 1);
            }
        }
    }

    /* Reference: fattn over the whole sequence on GPU 0. */
    float *ref[4];
    {
        Rank *R = &ranks[0];
        CUDA(cudaSetDevice(R->dev));
        float *d[10];
        for (int t = 0; t < 8; ++t) d[t] = dev_alloc(nf);
        d[8] = dev_alloc((size_t)(c.B * c.H * c.S));
        float *src[4] = {hq, hk, hv, hg};
        for (int t = 0; t < 4; ++t) CUDA(cudaMemcpy(d[t], src[t], nf * 4, cudaMemcpyHostToDevice));
        fattn_tensor q = shard_view(d[0], &c, c.S), k = shard_view(d[1], &c, c.S);
        fattn_tensor v = shard_view(d[2], &c, c.S), g = shard_view(d[3], &c, c.S);
        fattn_tensor o = shard_view(d[4], &c, c.S), lse = lse_view(d[8], &c, c.S);
        fattn_tensor dq = shard_view(d[5], &c, c.S), dk = shard_view(d[6], &c, c.S);
        fattn_tensor dv = shard_view(d[7], &c, c.S);
        fattn_attn_params p = fattn_attn_params_default();
        p.prec = c.prec;
        if (c.causal) p.causal = FATTN_CAUSAL_TOP_LEFT;
        FATTN(R->ctx, fattn_attn_fwd(R->ctx, &p, &q, &k, &v, &o, &lse, NULL, NULL, 0));
        FATTN(R->ctx, fattn_attn_bwd(R->ctx, &p, &q, &k, &v, &o, &lse, NULL, &g, &dq, &dk, &dv, NULL, 0));
        CUDA(cudaStreamSynchronize(R->st));
        for (int t = 0; t < 4; ++t) {
            ref[t] = malloc(nf * 4);
            if (!ref[t]) return 2;
            CUDA(cudaMemcpy(ref[t], d[4 + t], nf * 4, cudaMemcpyDeviceToHost));
        }
        for (int t = 0; t < 9; ++t) CUDA(cudaFree(d[t]));
    }

    const char *names[4] = {"o", "dq", "dk", "dv"};
    const double tol = c.prec == FATTN_PREC_F32 ? 1e-5 : 2e-2;
    int ok = 1;
    printf("ring_nccl: %d GPUs, B %lld, S %lld (%lld per GPU), H %lld, D %lld, %s, prec %s\n", N,
           (long long)c.B, (long long)c.S, (long long)sl, (long long)c.H, (long long)c.D,
           c.causal ? "causal" : "non-causal", c.prec == FATTN_PREC_F32 ? "f32" : "auto");
    for (int t = 0; t < 4; ++t) {
        const double e = rel_err(ring[0][t], ref[t], nf);
        const int same = memcmp(ring[0][t], ring[1][t], nf * 4) == 0;
        printf("ring_nccl: %-2s rel %.2e vs one GPU (tol %.0e), repeat %s\n", names[t], e, tol,
               same ? "bitwise equal" : "DIFFERS");
        ok &= e <= tol && same;
    }
    printf("ring_nccl: %s\n", ok ? "OK" : "FAILED");

    for (int r = 0; r < N; ++r) {
        Rank *R = &ranks[r];
        float *bufs[] = {R->q, R->k, R->v, R->dout, R->kg, R->vg, R->o_parts, R->lse_parts, R->o,
                         R->lse, R->dq, R->dq_tmp, R->dk_send, R->dv_send, R->dk_recv, R->dv_recv,
                         R->dk, R->dv};
        CUDA(cudaSetDevice(R->dev));
        for (size_t b = 0; b < sizeof bufs / sizeof bufs[0]; ++b) CUDA(cudaFree(bufs[b]));
        ncclCommDestroy(comms[r]);
        cublasDestroy(R->blas);
        fattn_ctx_free(R->ctx);
        CUDA(cudaStreamDestroy(R->st));
    }
    for (int t = 0; t < 4; ++t) free(ring[0][t]), free(ring[1][t]), free(ref[t]);
    free(hq), free(hk), free(hv), free(hg), free(hshard);
    return ok ? 0 : 1;
}
