/*
 * fattn.h — the one public C header of fattn (C99-compatible).
 *
 * fattn: exact attention *training* kernels (forward + backward) whose memory grows linearly
 * with sequence length, bitwise deterministic, for C/C++ training engines first.
 *
 * Lifecycle of every op (the contract: docs/CONTRACT.md of the repository):
 *   describe params -> fattn_*_supports() -> fattn_*_workspace_size() -> fattn_*_fwd / _bwd.
 * A library call never aborts, never exits, never prints. Errors come back as a fattn_status;
 * fattn_ctx_last_error() gives a message naming the argument and the rule.
 * A CUDA context never runs anything on the CPU: what it cannot run is FATTN_ERR_UNSUPPORTED.
 *
 * Layout: every tensor is a view with logical dims [B, S, H, D] and *element* strides.
 * Only the innermost stride (nb[3]) must be 1; any other stride (0 = broadcast, or a
 * non-contiguous view into a fused QKV buffer) is accepted and never copied.
 * Rules every view obeys (both families, same status and message):
 *   - data is aligned to its element size (f32: 4 bytes, f16/bf16: 2 bytes), as are cu_seqlens
 *     (int32: 4) and EXACT's saved buffer (4); else FATTN_ERR_BAD_VALUE. Workspaces may start
 *     anywhere (the library aligns inside the slack the size queries include).
 *   - every tensor a call names or implies (o, lse, dq, ... of a size query too) holds less than
 *     2^63 bytes; else FATTN_ERR_BAD_VALUE (no size product ever wraps).
 *   - an output view never addresses one element twice: no stride 0 on a dim of size > 1 and
 *     no self-overlap (o with nb[1] = 1 while Dv = 16); else FATTN_ERR_BAD_STRIDE. Inputs may.
 *   - outputs share no byte with each other, with any input, or with the cu_seqlens arrays.
 *
 * Threads: calls on one context may run concurrently from several threads (each CPU call runs
 * its own workers; CUDA calls are ordered on the context's stream), except the setters
 * (fattn_ctx_set_*) and fattn_ctx_free, which must not overlap any other call on that context.
 * A caller-set allocator must then be thread-safe. Error messages are kept per thread.
 */
#ifndef FATTN_FATTN_H
#define FATTN_FATTN_H

#include <stddef.h>
#include <stdint.h>

#define FATTN_VERSION_MAJOR 0
#define FATTN_VERSION_MINOR 1
#define FATTN_VERSION_PATCH 0

#if defined(_WIN32) && defined(FATTN_SHARED_BUILD)
#define FATTN_API __declspec(dllexport)
#elif defined(__GNUC__)
#define FATTN_API __attribute__((visibility("default")))
#else
#define FATTN_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/* Status                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* Each validation rule has its own status, so a caller (and a test) can tell them apart. */
typedef enum fattn_status {
    FATTN_OK = 0,
    FATTN_ERR_NULL_POINTER = 1,          /* a required pointer (ctx, params, tensor data) is NULL */
    FATTN_ERR_DTYPE_MISMATCH = 2,        /* tensors that must share a dtype do not; lse not f32 */
    FATTN_ERR_SHAPE_MISMATCH = 3,        /* a dim disagrees with q/k/v (B, S, H, D, Dv) */
    FATTN_ERR_GQA_HEADS = 4,             /* Hq % Hkv != 0 */
    FATTN_ERR_BAD_STRIDE = 5,            /* innermost stride != 1, or a negative stride */
    FATTN_ERR_OVERLAP = 6,               /* two outputs (or an output and an input) share memory */
    FATTN_ERR_BAD_BIAS = 7,              /* bias not broadcastable to [B, Hq, Sq, Skv], or bad dtype */
    FATTN_ERR_BAD_MASK = 8,              /* invalid causal/window combination or value */
    FATTN_ERR_BAD_SEQLENS = 9,           /* cu_seqlens: length, monotonicity, totals, B != 1 */
    FATTN_ERR_BAD_HEAD_DIM = 10,         /* D or Dv is 0, negative, or not run by this backend */
    FATTN_ERR_BAD_VALUE = 11,            /* a scalar out of range (scale NaN, enum value, nthreads),
                                            a size product past 2^63 bytes, a misaligned pointer */
    FATTN_ERR_UNSUPPORTED = 12,          /* valid request this backend/build does not run */
    FATTN_ERR_BACKEND_UNAVAILABLE = 13,  /* backend not compiled in, or no device */
    FATTN_ERR_WORKSPACE_TOO_SMALL = 14,  /* caller-provided workspace smaller than required */
    FATTN_ERR_OUT_OF_MEMORY = 15,        /* the context's allocator failed */
    FATTN_ERR_DEVICE = 16,               /* a CUDA runtime / cuBLAS error */
    FATTN_ERR_INTERNAL = 17
} fattn_status;

FATTN_API const char *fattn_status_string(fattn_status s);

FATTN_API const char *fattn_version(void); /* "MAJOR.MINOR.PATCH" */

/* ------------------------------------------------------------------------------------------ */
/* Data types, precision, algorithm                                                            */
/* ------------------------------------------------------------------------------------------ */

typedef enum fattn_dtype {
    FATTN_F32 = 0,
    FATTN_F16 = 1,
    FATTN_BF16 = 2
} fattn_dtype;

FATTN_API size_t fattn_dtype_size(fattn_dtype t);
FATTN_API const char *fattn_dtype_name(fattn_dtype t);

/* Arithmetic precision. AUTO resolves per backend and device (docs/CONTRACT.md §4):
 *   f32 inputs  -> TF32 on CUDA sm_80+, F32 elsewhere;
 *   f16/bf16    -> NATIVE on CUDA, F32 on the CPU.
 * Log fattn_resolve_prec()'s answer, never the requested value. */
typedef enum fattn_prec {
    FATTN_PREC_AUTO = 0,
    FATTN_PREC_F32 = 1,    /* strict IEEE fp32 FMA arithmetic */
    FATTN_PREC_TF32 = 2,   /* f32 inputs on tensor cores (CUDA only) */
    FATTN_PREC_NATIVE = 3  /* f16/bf16 tensor cores, fp32 accumulation (CUDA only) */
} fattn_prec;

FATTN_API const char *fattn_prec_name(fattn_prec p);

typedef enum fattn_algo {
    FATTN_ALGO_FUSED = 0,  /* flash: O and LSE are all that is kept for the backward */
    FATTN_ALGO_EXACT = 1   /* materialized [B, Hq, Sq, Skv] probabilities kept for the backward */
} fattn_algo;

FATTN_API const char *fattn_algo_name(fattn_algo a);

/* ------------------------------------------------------------------------------------------ */
/* Context                                                                                     */
/* ------------------------------------------------------------------------------------------ */

typedef struct fattn_ctx fattn_ctx_t;

typedef enum fattn_backend {
    FATTN_BACKEND_CPU = 0,
    FATTN_BACKEND_CUDA = 1
} fattn_backend;

/* nthreads <= 0: use the hardware concurrency (at most 1024). Results never depend on nthreads.
 * nthreads > 1024: FATTN_ERR_BAD_VALUE (scratch is sized per thread). */
FATTN_API fattn_status fattn_ctx_init_cpu(int nthreads, fattn_ctx_t **out_ctx);
/* stream: a cudaStream_t (NULL = legacy default stream). FATTN_ERR_BACKEND_UNAVAILABLE when the
 * library was built without CUDA or the device does not exist. */
FATTN_API fattn_status fattn_ctx_init_cuda(int device, void *stream, fattn_ctx_t **out_ctx);
FATTN_API void fattn_ctx_free(fattn_ctx_t *ctx);

FATTN_API fattn_backend fattn_ctx_backend(const fattn_ctx_t *ctx);
FATTN_API int fattn_ctx_nthreads(const fattn_ctx_t *ctx);          /* CPU: resolved thread count */
FATTN_API fattn_status fattn_ctx_set_nthreads(fattn_ctx_t *ctx, int nthreads);
/* CPU: run the library's parallel loops on the caller's thread pool instead of fattn's own.
 * run(user, n, max_threads, task, task_ctx) must call task(task_ctx, i) exactly once for every i
 * in [0, n), on any threads (the calling one included) and in any order, using at most
 * max_threads threads (the context's thread count, fewer for fewer items), and return after
 * every call has returned; task never throws. The items are independent (each writes its own
 * outputs in a fixed order), so results are bitwise the same however they are spread.
 * run = NULL restores fattn's own persistent pool (the default). An engine with its own workers
 * (ggml, an OpenMP team) avoids a second set of threads competing for its cores: PyTorch's idle
 * OpenMP workers spin for milliseconds after each op, which slowed fattn's CPU calls in a torch
 * process by up to 40% (fattn's PyTorch op installs torch's intra-op threads here). */
typedef void (*fattn_task_fn)(void *task_ctx, int64_t i);
typedef void (*fattn_parallel_fn)(void *user, int64_t n, int max_threads, fattn_task_fn task,
                                  void *task_ctx);
FATTN_API fattn_status fattn_ctx_set_parallel(fattn_ctx_t *ctx, fattn_parallel_fn run, void *user);
/* The instruction set the CPU kernels run on this machine: "avx512", "avx2" or "base" (x86-64
 * SSE2; also every non-x86 build). Picked once from the CPU's features; the environment variable
 * FATTN_CPU_ISA=avx2|base caps it (never above what the CPU has). Log it beside the resolved
 * precision: the CPU rate differs several-fold between the paths. */
FATTN_API const char *fattn_cpu_isa(void);
FATTN_API fattn_status fattn_ctx_set_stream(fattn_ctx_t *ctx, void *stream); /* CUDA only */

/* Which CUDA kernel family a context may run (CUDA contexts only; the CPU accepts AUTO alone).
 *   AUTO      the fastest family that serves the request on this device (default)
 *   PORTABLE  the sm_80+ family only (mma.sync tensor cores, strict-f32 scalar kernels), also on
 *             a Hopper GPU: for A/B runs and for testing that family where sm_90 is preferred
 *   SM90      the sm_90a family (wgmma + TMA) only; a request it cannot run is UNSUPPORTED with
 *             the reason, never served by another family. Today: FUSED, bf16/f16 at prec NATIVE
 *             with D = Dv a multiple of 8 up to 256, f32 at prec TF32 with D = Dv = 64 or 128;
 *             q/k/v (and dout) 16-byte aligned with strides in whole 16-byte chunks. Under AUTO
 *             a dout that breaks the last rule runs the portable backward
 *             (fattn_attn_supports() cannot see dout).
 * The choice is part of what fattn_attn_supports() answers; the EXACT algorithm (cuBLAS) is not
 * a kernel family and ignores it. */
typedef enum fattn_cuda_family {
    FATTN_CUDA_FAMILY_AUTO = 0,
    FATTN_CUDA_FAMILY_PORTABLE = 1,
    FATTN_CUDA_FAMILY_SM90 = 2
} fattn_cuda_family;
FATTN_API fattn_status fattn_ctx_set_cuda_family(fattn_ctx_t *ctx, fattn_cuda_family family);

/* Message of the calling thread's last failed call on ctx ("k: ne[3] (head dim) is 80 but q
 * has 64"); "" if this thread has not failed on ctx. Messages are per thread, so threads sharing
 * a context never see (or race on) each other's; a thread keeps them for the 8 contexts it most
 * recently failed on. The pointer is valid until this thread's next failing call.
 * ctx == NULL: the calling thread's last failure of a call that had no context (ctx init). */
FATTN_API const char *fattn_ctx_last_error(const fattn_ctx_t *ctx);

/* Allocator used when a call is given no workspace (workspace == NULL). Memory is in the
 * context's space (host for CPU, device for CUDA). Defaults: aligned malloc / cudaMallocAsync. */
typedef void *(*fattn_alloc_fn)(size_t bytes, void *user);
typedef void (*fattn_free_fn)(void *ptr, void *user);
FATTN_API fattn_status fattn_ctx_set_allocator(fattn_ctx_t *ctx, fattn_alloc_fn alloc,
                                               fattn_free_fn free_fn, void *user);

/* ------------------------------------------------------------------------------------------ */
/* Tensor views                                                                                */
/* ------------------------------------------------------------------------------------------ */

/* Logical dims ne = [B, S, H, D]; nb = element strides of those dims (nb[3] must be 1).
 * lse views use ne = [B, Hq, Sq, 1] (nb[2] must be 1). A bias uses ne = [B|1, Hq|1, Sq, Skv]. */
typedef struct fattn_tensor {
    void *data;
    fattn_dtype dtype;
    int64_t ne[4];
    int64_t nb[4];
} fattn_tensor;

/* Contiguous view: strides derived from ne. */
FATTN_API fattn_tensor fattn_tensor_contiguous(void *data, fattn_dtype dtype, int64_t n0, int64_t n1,
                                               int64_t n2, int64_t n3);
FATTN_API fattn_tensor fattn_tensor_4d(void *data, fattn_dtype dtype, int64_t n0, int64_t n1,
                                       int64_t n2, int64_t n3, int64_t s0, int64_t s1, int64_t s2,
                                       int64_t s3);
FATTN_API fattn_tensor fattn_tensor_none(void); /* data NULL: "not given" (e.g. no bias) */

/* ------------------------------------------------------------------------------------------ */
/* Softmax attention                                                                           */
/* ------------------------------------------------------------------------------------------ */
/*
 * O = softmax(scale·Q·Kᵀ + bias + masks) · V, row-wise over keys.
 *   q [B, Sq, Hq, D]   k [B, Skv, Hkv, D]   v [B, Skv, Hkv, Dv]   o [B, Sq, Hq, Dv]
 *   lse [B, Hq, Sq] float32: natural log of each row's softmax denominator (scale, bias included).
 * GQA: Hq % Hkv == 0, query head h reads kv head h / (Hq / Hkv).
 * Masks are defined against one diagonal: TOP_LEFT (key j = i for query i) or BOTTOM_RIGHT
 * (j = i + Skv - Sq, FlashAttention's convention). Causal allows j <= diagonal; a window
 * (left, right) allows diagonal - left <= j <= diagonal + right, -1 = unbounded. Combined with
 * causal, window_right must be -1 or 0, and window_align must equal the causal alignment.
 * A query row with no allowed key: o = 0, lse = -inf, its gradients 0. Never NaN from finite inputs
 * with finite scores; a row with a +inf or NaN score gets o = NaN, lse = NaN or +inf, and NaN/inf
 * gradients; a -inf score is a masked key (docs/CONTRACT.md §3, "Overflow and NaN").
 * Varlen: cu_seqlens_q / cu_seqlens_kv (int32, num_seqs + 1 entries, in the context's memory
 * space); tensors then have B = 1 and S = total tokens; masks use each sequence's own lengths;
 * a bias is indexed by packed (global) token positions: [1, Hq|1, total_q, total_kv].
 */

typedef enum fattn_causal {
    FATTN_CAUSAL_NONE = 0,
    FATTN_CAUSAL_TOP_LEFT = 1,
    FATTN_CAUSAL_BOTTOM_RIGHT = 2
} fattn_causal;

typedef enum fattn_align {
    FATTN_ALIGN_TOP_LEFT = 0,
    FATTN_ALIGN_BOTTOM_RIGHT = 1
} fattn_align;

typedef struct fattn_attn_params {
    float scale;               /* 0 (default) means 1/sqrt(D); finite, |scale| <= 2^126 */
    fattn_tensor bias;         /* optional additive bias (data NULL = none); f32/f16/bf16; may hold -inf;
                                  its gradient: fattn_attn_bwd_ex (dbias) */
    fattn_causal causal;
    int64_t window_left;       /* -1 = unbounded */
    int64_t window_right;      /* -1 = unbounded */
    fattn_align window_align;  /* diagonal the window is measured from */
    const int32_t *cu_seqlens_q;   /* varlen (NULL = dense); num_seqs + 1 entries */
    const int32_t *cu_seqlens_kv;  /* varlen, required with cu_seqlens_q */
    int64_t num_seqs;
    int64_t max_seqlen_q;      /* varlen: upper bound of the sequence lengths (0 = derive; CPU only) */
    int64_t max_seqlen_kv;
    fattn_prec prec;
    fattn_algo algo;
} fattn_attn_params;

FATTN_API fattn_attn_params fattn_attn_params_default(void);

/* The precision a call with these params and this q would run (never AUTO). */
FATTN_API fattn_prec fattn_resolve_prec(const fattn_ctx_t *ctx, const fattn_attn_params *p,
                                        const fattn_tensor *q);

/* FATTN_OK if this context runs the forward and backward for these shapes; otherwise the
 * status of the first rule broken and, in why (may be NULL), the reason. Same function that
 * dispatch uses: "supported" and "what runs" cannot disagree for these q, k, v and params.
 * The views it does not see (o, lse, dout, dq, dk, dv) are checked by the call itself; one
 * backend rule lives there: the CUDA EXACT arm (cuBLAS) needs the token stride (nb[1]) of o,
 * dout and dq to be at least the head dim, else the call returns FATTN_ERR_UNSUPPORTED. */
FATTN_API fattn_status fattn_attn_supports(fattn_ctx_t *ctx, const fattn_attn_params *p,
                                           const fattn_tensor *q, const fattn_tensor *k,
                                           const fattn_tensor *v, char *why, size_t why_len);

typedef enum fattn_dir {
    FATTN_DIR_FWD = 0,
    FATTN_DIR_BWD = 1
} fattn_dir;

/* Scratch bytes a call needs (freed by the caller after the call). */
FATTN_API fattn_status fattn_attn_workspace_size(fattn_ctx_t *ctx, const fattn_attn_params *p,
                                                 const fattn_tensor *q, const fattn_tensor *k,
                                                 const fattn_tensor *v, fattn_dir dir,
                                                 size_t *bytes);

/* Bytes of the auxiliary buffer the forward fills and the backward reads (0 for FUSED; the
 * probabilities for EXACT). The caller keeps it between the two calls, like o and lse. */
FATTN_API fattn_status fattn_attn_saved_size(fattn_ctx_t *ctx, const fattn_attn_params *p,
                                             const fattn_tensor *q, const fattn_tensor *k,
                                             const fattn_tensor *v, size_t *bytes);

/* workspace == NULL: the context allocates it (and frees it before returning). */
FATTN_API fattn_status fattn_attn_fwd(fattn_ctx_t *ctx, const fattn_attn_params *p,
                                      const fattn_tensor *q, const fattn_tensor *k,
                                      const fattn_tensor *v, const fattn_tensor *o,
                                      const fattn_tensor *lse, void *saved, void *workspace,
                                      size_t workspace_bytes);

FATTN_API fattn_status fattn_attn_bwd(fattn_ctx_t *ctx, const fattn_attn_params *p,
                                      const fattn_tensor *q, const fattn_tensor *k,
                                      const fattn_tensor *v, const fattn_tensor *o,
                                      const fattn_tensor *lse, const void *saved,
                                      const fattn_tensor *dout, const fattn_tensor *dq,
                                      const fattn_tensor *dk, const fattn_tensor *dv,
                                      void *workspace, size_t workspace_bytes);

/* ---- The bias gradient (dbias) ------------------------------------------------------------
 * The calls above never compute a gradient for the bias. The _ex calls below take a request
 * mask `want` (0 = the plain call's answer, bit for bit) and a backward that also writes dbias.
 *   FATTN_ATTN_WANT_DBIAS: the backward will write dbias = dL/d(bias), the gradient of the logit
 *     (dS = P ∘ (dP − delta), not multiplied by scale: the bias adds to scale·q·k).
 * dbias has the bias's logical shape *reduced over its broadcast dims*: ne = [B or 1, Hq or 1,
 * Sq or 1, Skv], 1 exactly where the bias view steps by 0 (a dim of extent 1 or stride 0), e.g.
 * a bias [1, Hq, Sq, Skv] -> dbias [1, Hq, Sq, Skv] summed over the batch; a bias [B, 1, Sq, Skv]
 * with nb[2] = 0 -> dbias [B, 1, 1, Skv] summed over heads and query rows. Varlen: [1, Hq|1,
 * total_q|1, total_kv], indexed by packed positions like the bias. dtype f32 whatever the bias
 * dtype (it is a float32 reduction; convert it yourself). Any output view: innermost stride 1,
 * never one element twice, no byte shared with another view. Broken rules: SHAPE_MISMATCH,
 * DTYPE_MISMATCH, BAD_STRIDE, OVERLAP, each naming dbias; dbias given without a bias: BAD_BIAS.
 * Entries whose key the masks exclude, whose bias is -inf, or that lie outside every sequence
 * (varlen) are 0. The reduction over broadcast dims runs inside the kernels in a fixed order:
 * bitwise deterministic, independent of the thread count, no workspace beyond the plain call's.
 * Backends: the CPU (FUSED and EXACT); CUDA's EXACT arm, and its fused kernels at every prec (a
 * bias-gradient kernel after the backward: mma.sync for NATIVE and TF32, fp32 FMA for F32;
 * fattn_attn_supports_ex with FATTN_ATTN_WANT_DBIAS checks its shared memory). */
#define FATTN_ATTN_WANT_DBIAS 1u

FATTN_API fattn_status fattn_attn_supports_ex(fattn_ctx_t *ctx, const fattn_attn_params *p,
                                              const fattn_tensor *q, const fattn_tensor *k,
                                              const fattn_tensor *v, uint32_t want, char *why,
                                              size_t why_len);
FATTN_API fattn_status fattn_attn_workspace_size_ex(fattn_ctx_t *ctx, const fattn_attn_params *p,
                                                    const fattn_tensor *q, const fattn_tensor *k,
                                                    const fattn_tensor *v, uint32_t want,
                                                    fattn_dir dir, size_t *bytes);
/* fattn_attn_bwd plus dbias (NULL, or data NULL: not requested, exactly fattn_attn_bwd). The
 * other outputs are bitwise the same whether dbias is requested or not. */
FATTN_API fattn_status fattn_attn_bwd_ex(fattn_ctx_t *ctx, const fattn_attn_params *p,
                                         const fattn_tensor *q, const fattn_tensor *k,
                                         const fattn_tensor *v, const fattn_tensor *o,
                                         const fattn_tensor *lse, const void *saved,
                                         const fattn_tensor *dout, const fattn_tensor *dq,
                                         const fattn_tensor *dk, const fattn_tensor *dv,
                                         const fattn_tensor *dbias, void *workspace,
                                         size_t workspace_bytes);

/* Memory model (docs/CONTRACT.md §6), bytes for one call with these shapes and p->algo.
 * Never under-predicts the measured peak. "inputs" = q, k, v (+ bias); "outputs" = o, lse. */
typedef struct fattn_attn_memory_info {
    uint64_t inputs_bytes;        /* q, k, v, bias as described by the views (dense extents) */
    uint64_t saved_bytes;         /* kept between fwd and bwd beyond the inputs: o, lse, saved buffer */
    uint64_t fwd_workspace_bytes;
    uint64_t bwd_workspace_bytes;
    uint64_t grads_bytes;         /* dout, dq, dk, dv (+ dbias: fattn_attn_memory_ex) */
    uint64_t fwd_peak_bytes;      /* inputs + saved + fwd workspace */
    uint64_t bwd_peak_bytes;      /* inputs + saved + grads + bwd workspace */
} fattn_attn_memory_info;

FATTN_API fattn_status fattn_attn_memory(fattn_ctx_t *ctx, const fattn_attn_params *p,
                                         const fattn_tensor *q, const fattn_tensor *k,
                                         const fattn_tensor *v, fattn_attn_memory_info *out);
/* Same with a request mask (see FATTN_ATTN_WANT_DBIAS): with the dbias bit, grads_bytes and
 * bwd_peak_bytes also count dbias (f32, the bias's reduced shape). want = 0: fattn_attn_memory. */
FATTN_API fattn_status fattn_attn_memory_ex(fattn_ctx_t *ctx, const fattn_attn_params *p,
                                            const fattn_tensor *q, const fattn_tensor *k,
                                            const fattn_tensor *v, uint32_t want,
                                            fattn_attn_memory_info *out);

/* Longest S (self-attention, Sq = Skv = S) whose bwd_peak_bytes fits in budget_bytes, for the
 * geometry B, Hq, Hkv, D, Dv, dtype and p (masks, algo). 0 if even S = 1 does not fit. */
FATTN_API fattn_status fattn_attn_max_seqlen(fattn_ctx_t *ctx, const fattn_attn_params *p,
                                             fattn_dtype dtype, int64_t B, int64_t Hq, int64_t Hkv,
                                             int64_t D, int64_t Dv, uint64_t budget_bytes,
                                             int64_t *max_s);

/* ---- Merging partial results (context parallelism, KV blocks) ------------------------------
 * fattn_attn_merge combines n_parts partial results of one set of query rows, each the forward
 * over one block of keys (o normalized over the block's keys, lse its log-sum-exp), into the
 * result over all of them, exactly (log-sum-exp rescaling, f32 arithmetic), folded left to right
 * in array order:
 *   acc = part 0;  for i = 1 .. n_parts-1:  m = max(lse_acc, lse_i),
 *     w_a = exp(lse_acc - m), w_b = exp(lse_i - m), t = w_a + w_b,
 *     o_acc = o_acc * (w_a / t) + o_i * (w_b / t),  lse_acc = m + log(t)
 * A part whose lse is -inf in a row adds nothing to that row (its o there is not read, so a
 * block that no query row of the row's sees may leave o unwritten); a row whose every part is
 * -inf gives o = 0, lse = -inf (docs/CONTRACT.md). NaN propagates.
 *   o_parts[i]   [B, S, H, Dv], f32, f16 or bf16 (each part its own dtype); read in f32
 *   lse_parts[i] ne = [B, H, S, 1] f32, nb[2] = 1: the forward's lse view
 *   o_out        [B, S, H, Dv], f32, f16 or bf16 (rounded once, at the end)
 *   lse_out      ne = [B, H, S, 1] f32, nb[2] = 1
 * Every view agrees with o_out's dims (SHAPE_MISMATCH naming the view, "o_parts[2]: ne[1] (seq)
 * is 7 but o_out has 8"); lse not f32: DTYPE_MISMATCH; the view rules of this header (strides,
 * alignment, 2^63 bytes) as for the forward; o_out and lse_out share no byte with each other or
 * with any part (OVERLAP: merge into a buffer of its own, not into part 0). n_parts < 1:
 * FATTN_ERR_BAD_VALUE; o_parts or lse_parts NULL: FATTN_ERR_NULL_POINTER. o_parts and
 * lse_parts are host arrays of n_parts views; the views' data are in the context's memory.
 * The order fixes the bits: pass the blocks in a fixed order (e.g. key-block order), never in
 * arrival order. Each row is computed by one thread from its own inputs: bitwise deterministic,
 * independent of the thread count. CPU and CUDA results may differ in the last bits (exp, log).
 * Backends: CPU; CUDA (enqueued on the context's stream; a table of n_parts * 64 bytes comes
 * from the context's allocator, freed stream-ordered before the call returns). No workspace.
 * With the global (merged) o and lse, fattn_attn_bwd over one key block gives that block's
 * exact share of dq, dk, dv (algo FUSED; docs/RING.md). */
FATTN_API fattn_status fattn_attn_merge(fattn_ctx_t *ctx, int64_t n_parts,
                                        const fattn_tensor *o_parts, const fattn_tensor *lse_parts,
                                        const fattn_tensor *o_out, const fattn_tensor *lse_out);

/* ------------------------------------------------------------------------------------------ */
/* PaTH attention (docs/PATH.md) — section owned by the PaTH family                            */
/* ------------------------------------------------------------------------------------------ */
/* FATTN_PATH_API_BEGIN */
/*
 * PaTH attention: softmax attention whose score walks the query back through Householder-like
 * matrices H_t = I - beta_t w_t w_t^T (Yang et al. 2025; definition: docs/PATH.md):
 *   s_ij = q_i^T H_i H_{i-1} ... H_{j+1} k_j   (j <= i, causal; empty product = I)
 *   G_t  = sum_{u <= t} g_u                    (prefix sum done inside, restarting per sequence)
 *   l_ij = scale * (s_ij + G_i - G_j)          (the gate is multiplied by scale too, as FLA)
 *   o_i  = sum_j softmax_j(l_i.) v_j,  lse_i = log sum_j exp(l_ij)  (natural log)
 * Tensors (fattn_tensor views, element strides, innermost stride 1):
 *   q [B, T, Hq, K]   k [B, T, H, K]   v [B, T, H, V]   (f32, f16 or bf16; one dtype)
 *   w [B, T, H, K] f32          beta: ne = [B, T, H, 1] f32      g (optional): ne = [B, T, Hq, 1] f32
 *   o [B, T, Hq, V] (q's dtype) lse: ne = [B, Hq, T, 1] f32, nb[2] = 1
 *   backward: dout like o; dq, dk, dv like q, k, v (q's dtype); dw like w, dbeta like beta,
 *   dg like g (all f32). dg must be given exactly when g is.
 * GQA: Hq % H == 0; query head hq uses kv head hq / (Hq / H) (w, beta belong to the kv head, the
 * gate to the query head). K, V from 1 to 256 on the CPU and 1 to 128 on CUDA (the kernels of 32,
 * 64 or 128 with zeros past K and V), V may differ from K, any T >= 1.
 * Varlen: cu_seqlens (int32, num_seqs + 1 entries, host memory on both backends) with B = 1, T = total tokens;
 * every sequence restarts its chunks, segments, gate prefix sum and Householder products.
 *
 * w / beta check: the products are only bounded (spectral norm <= 1) when |w_t| = 1 and
 * beta_t in [0, 2]; low-precision walks (FLA's, and fattn's CUDA kernels) rely on that.
 *   FATTN_PATH_CHECK_STRICT (default): fattn_path_fwd and fattn_path_bwd reject any token whose
 *     | |w_t|_2 - 1 | > check_tol (0 = 1e-3) or beta_t outside [0, 2] or a non-finite value, with
 *     FATTN_ERR_BAD_VALUE and a message naming the token and head. Cost: one pass over w and beta.
 *   FATTN_PATH_CHECK_NONE: no check; the CPU backend then computes the definition above as is in
 *     f32 (results are exact to f32 rounding while the products stay moderate; nothing clamps).
 *
 * History (docs/PATH.md, Memory): the backward keeps q_t walked back to every 512-token segment start.
 *   PACKED (default): exactly sum_seq sum_{r=1}^{N-1} (L - r*512) token-snapshots x Hq x K x
 *     sizeof(q dtype) bytes (N = ceil(L / 512); on CUDA K rounded up to whole 16 bytes); RECTANGULAR: T_total x max N snapshots (FLA's
 *     layout; debug baseline only). Both are part of the backward workspace.
 * Backends: CPU (f32 arithmetic) and CUDA (sm_80+: bf16/f16 tensor cores, f32 inputs on TF32; the
 * STRICT check synchronizes the stream once per call). Both bitwise deterministic.
 * The forward saves nothing beyond o and lse: the backward recomputes everything else.
 */
typedef enum fattn_path_history {
    FATTN_PATH_HISTORY_PACKED = 0,
    FATTN_PATH_HISTORY_RECTANGULAR = 1
} fattn_path_history;

typedef enum fattn_path_check {
    FATTN_PATH_CHECK_STRICT = 0,
    FATTN_PATH_CHECK_NONE = 1
} fattn_path_check;

typedef struct fattn_path_params {
    float scale;                  /* 0 (default) means 1/sqrt(K) */
    const int32_t *cu_seqlens;    /* varlen (NULL = dense); num_seqs + 1 entries, host memory */
    int64_t num_seqs;
    fattn_path_history history;   /* backward's transformed-query history layout */
    fattn_path_check check;       /* w / beta input check, see above */
    float check_tol;              /* STRICT: allowed | |w| - 1 |; 0 means 1e-3 */
} fattn_path_params;

FATTN_API fattn_path_params fattn_path_params_default(void);

/* FATTN_OK if this context runs PaTH fwd and bwd for these views (shapes, dtypes, strides; the
 * w/beta values are checked by fwd/bwd, not here). g may be NULL or have data NULL (no gate). */
FATTN_API fattn_status fattn_path_supports(fattn_ctx_t *ctx, const fattn_path_params *p,
                                           const fattn_tensor *q, const fattn_tensor *k,
                                           const fattn_tensor *v, const fattn_tensor *w,
                                           const fattn_tensor *beta, const fattn_tensor *g,
                                           char *why, size_t why_len);

/* Scratch of one call; history_bytes is the part of total_bytes that holds the history (bwd
 * only; 0 for fwd), in the layout p->history selects. */
typedef struct fattn_path_workspace_info {
    uint64_t total_bytes;
    uint64_t history_bytes;
} fattn_path_workspace_info;

FATTN_API fattn_status fattn_path_workspace_size(fattn_ctx_t *ctx, const fattn_path_params *p,
                                                 const fattn_tensor *q, const fattn_tensor *k,
                                                 const fattn_tensor *v, const fattn_tensor *w,
                                                 const fattn_tensor *beta, const fattn_tensor *g,
                                                 fattn_dir dir, fattn_path_workspace_info *out);

/* workspace == NULL: the context allocates it (and frees it before returning). */
FATTN_API fattn_status fattn_path_fwd(fattn_ctx_t *ctx, const fattn_path_params *p,
                                      const fattn_tensor *q, const fattn_tensor *k,
                                      const fattn_tensor *v, const fattn_tensor *w,
                                      const fattn_tensor *beta, const fattn_tensor *g,
                                      const fattn_tensor *o, const fattn_tensor *lse,
                                      void *workspace, size_t workspace_bytes);

FATTN_API fattn_status fattn_path_bwd(fattn_ctx_t *ctx, const fattn_path_params *p,
                                      const fattn_tensor *q, const fattn_tensor *k,
                                      const fattn_tensor *v, const fattn_tensor *w,
                                      const fattn_tensor *beta, const fattn_tensor *g,
                                      const fattn_tensor *o, const fattn_tensor *lse,
                                      const fattn_tensor *dout, const fattn_tensor *dq,
                                      const fattn_tensor *dk, const fattn_tensor *dv,
                                      const fattn_tensor *dw, const fattn_tensor *dbeta,
                                      const fattn_tensor *dg, void *workspace,
                                      size_t workspace_bytes);

/* Memory model, bytes for one fwd + bwd with these shapes (dense extents of the views). */
typedef struct fattn_path_memory_info {
    uint64_t inputs_bytes;               /* q, k, v, w, beta, g */
    uint64_t saved_bytes;                /* kept between fwd and bwd: o, lse */
    uint64_t fwd_workspace_bytes;
    uint64_t bwd_workspace_bytes;        /* includes the history in p->history's layout */
    uint64_t history_packed_bytes;       /* the history alone, PACKED */
    uint64_t history_rectangular_bytes;  /* the history alone, RECTANGULAR */
    uint64_t grads_bytes;                /* dout, dq, dk, dv, dw, dbeta, dg */
    uint64_t fwd_peak_bytes;             /* inputs + saved + fwd workspace */
    uint64_t bwd_peak_bytes;             /* inputs + saved + grads + bwd workspace */
} fattn_path_memory_info;

FATTN_API fattn_status fattn_path_memory(fattn_ctx_t *ctx, const fattn_path_params *p,
                                         const fattn_tensor *q, const fattn_tensor *k,
                                         const fattn_tensor *v, const fattn_tensor *w,
                                         const fattn_tensor *beta, const fattn_tensor *g,
                                         fattn_path_memory_info *out);
/* FATTN_PATH_API_END */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FATTN_FATTN_H */
