// fattn_ggml_common.h — what the ggml ops of this folder share (internal): the calling thread's
// last error and the compute-time failure record (defined in fattn_ggml.cpp, read by the C API's
// fattn_ggml_last_error / fattn_ggml_compute_error), the ggml threads as fattn's parallel pool,
// fattn views of ggml tensors, the layout rules, and drive(): one node's call on its threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <thread>

#include "fattn/fattn.h"
#include "ggml.h"

namespace fattn_ggml_detail {

using std::string;

// Sets the calling thread's last error (fattn_ggml_last_error) and returns s.
fattn_status fail(fattn_status s, string msg);
// The calling thread's last error.
const string &last_error();
// A failure while a graph computes (the op has no status to return from inside
// ggml_graph_compute): counted, the first kept for fattn_ggml_compute_error.
void record_compute_failure(const string &msg);

inline string S(int64_t x) { return std::to_string(x); }

// Whether t is a node of the PaTH op (fattn_ggml_path.cpp): forward or backward.
bool is_path_node(const ggml_tensor *t);

// A CPU fattn context for the graph-building queries (threads: its thread count).
struct CpuCtx {
    fattn_ctx_t *ctx = nullptr;
    explicit CpuCtx(int threads = 1) { (void)fattn_ctx_init_cpu(threads, &ctx); }
    ~CpuCtx() { fattn_ctx_free(ctx); }
    CpuCtx(const CpuCtx &) = delete;
    CpuCtx &operator=(const CpuCtx &) = delete;
};

// why (may be NULL) <- msg, truncated to why_len.
inline void copy_why(char *why, size_t why_len, const char *msg) {
    if (!why || why_len == 0) return;
    std::strncpy(why, msg, why_len - 1);
    why[why_len - 1] = '\0';
}

// The leading fields of ggml's struct ggml_custom_op_params (ggml-impl.h): what a GGML_OP_CUSTOM
// node keeps in op_params, read here to recognise this library's nodes.
struct CustomHead {
    ggml_custom_op_t fun;
    int n_tasks;
    void *userdata;
};

// An op's record R (a struct with a uint32_t magic first), placed in the context's memory pool
// with ggml_new_buffer: its bytes, and the record of node t if t is a node of function fun whose
// record carries magic (else nullptr).
template <class R>
size_t record_bytes() {
    return (sizeof(R) + 63) & ~size_t(63);
}
template <class R>
const R *record_of(const ggml_tensor *t, ggml_custom_op_t fun, uint32_t magic) {
    if (!t || t->op != GGML_OP_CUSTOM) return nullptr;
    CustomHead h;
    std::memcpy(&h, t->op_params, sizeof h);
    if (h.fun != fun || !h.userdata) return nullptr;
    const R *r = static_cast<const R *>(h.userdata);
    return r->magic == magic ? r : nullptr;
}

// Whether ctx's memory pool has room for an op's tensors (metadata; data too when the context
// allocates) and its record of record bytes; else false with the error set.
inline bool ctx_has_room(ggml_context *ctx, size_t tensors, size_t data_bytes, size_t record) {
    size_t need = tensors * ggml_tensor_overhead() + record + 256;
    if (!ggml_get_no_alloc(ctx)) need += data_bytes + 64;
    const size_t size = ggml_get_mem_size(ctx), used = ggml_used_mem(ctx);
    if (size >= used && size - used >= need) return true;
    fail(FATTN_ERR_OUT_OF_MEMORY, "ctx: its memory pool has no room for the op's " + S(int64_t(tensors)) +
                                      " tensors and record (" + S(int64_t(used)) + " of " + S(int64_t(size)) +
                                      " bytes used)");
    return false;
}

// The LSE view [S, H, B] of an op's O view o [V, S, H, B] (the F32 node holds O then LSE).
inline ggml_tensor *lse_part(ggml_context *ctx, ggml_tensor *o, const char *name) {
    const int64_t S = o->ne[1], H = o->ne[2], B = o->ne[3];
    const size_t es = sizeof(float);
    ggml_tensor *lse = ggml_view_3d(ctx, o->view_src, S, H, B, S * es, S * H * es, size_t(ggml_nelements(o)) * es);
    ggml_format_name(lse, "%s", name);
    return lse;
}

// ------------------------------------------------------------------ ggml threads as fattn's pool

struct Job {
    fattn_task_fn task;
    void *task_ctx;
    int64_t n;
    int max_threads;
    uint64_t id;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
};

// One per node; reset by thread 0 after every computation (all helpers have left by then).
struct Pool {
    std::atomic<Job *> cur{nullptr};
    std::atomic<int> users{0};     // helpers holding a pointer read from cur
    std::atomic<int> finished{0};  // thread 0's fattn call has returned
    std::atomic<int> exited{0};    // helpers that saw finished
    uint64_t last_id = 0;          // thread 0 only
};

inline void relax() { std::this_thread::yield(); }

inline void run_items(Job *j) {
    for (int64_t i; (i = j->next.fetch_add(1)) < j->n;) {
        j->task(j->task_ctx, i);
        j->done.fetch_add(1);
    }
}

// fattn_parallel_fn, called on thread 0 by the fattn call.
inline void pool_run(void *user, int64_t n, int max_threads, fattn_task_fn task, void *task_ctx) {
    Pool *pool = static_cast<Pool *>(user);
    if (n <= 0) return;
    if (n == 1 || max_threads <= 1) {
        for (int64_t i = 0; i < n; ++i) task(task_ctx, i);
        return;
    }
    Job j;
    j.task = task;
    j.task_ctx = task_ctx;
    j.n = n;
    j.max_threads = max_threads;
    j.id = ++pool->last_id;
    pool->cur.store(&j);
    run_items(&j);
    while (j.done.load() < n) relax();
    // Unpublish, then wait for every helper that may still hold &j (one that read cur before the
    // store re-checks it after counting itself in users, so it either is counted or backs off).
    pool->cur.store(nullptr);
    while (pool->users.load() != 0) relax();
}

inline void pool_help(Pool *pool, int ith) {
    uint64_t seen = 0;
    while (!pool->finished.load()) {
        Job *j = pool->cur.load();
        if (!j) {
            relax();
            continue;
        }
        pool->users.fetch_add(1);
        if (pool->cur.load() == j && j->id != seen) {
            seen = j->id;
            if (ith < j->max_threads) run_items(j);
        } else {
            relax();
        }
        pool->users.fetch_sub(1);
    }
    pool->exited.fetch_add(1);
}

inline void pool_finish(Pool *pool, int nth) {
    pool->finished.store(1);
    while (pool->exited.load() < nth - 1) relax();
    pool->exited.store(0);
    pool->finished.store(0);
}

// ------------------------------------------------------------------ views

// fattn's dtype of a ggml type q, k, v may have (check_inputs admits only these three).
inline fattn_dtype dtype_of(ggml_type t) {
    return t == GGML_TYPE_F16 ? FATTN_F16 : t == GGML_TYPE_BF16 ? FATTN_BF16 : FATTN_F32;
}

// A ggml [ne0, ne1, ne2, ne3] = [D, S, H, B] tensor as fattn's [B, S, H, D] view (element strides).
inline fattn_tensor bshd(const ggml_tensor *t, void *data) {
    const int64_t es = (int64_t)ggml_type_size(t->type);
    return fattn_tensor_4d(data, dtype_of(t->type), t->ne[3], t->ne[1], t->ne[2], t->ne[0],
                           (int64_t)t->nb[3] / es, (int64_t)t->nb[1] / es, (int64_t)t->nb[2] / es,
                           (int64_t)t->nb[0] / es);
}

// A contiguous ggml [D, S, H, B] block at data.
inline fattn_tensor bshd_contiguous(void *data, int64_t D, int64_t Sn, int64_t H, int64_t B,
                             fattn_dtype dt = FATTN_F32) {
    return fattn_tensor_4d(data, dt, B, Sn, H, D, D * Sn * H, D, D * Sn, 1);
}

// lse [Sq, Hq, B] contiguous as fattn's [B, Hq, Sq, 1].
inline fattn_tensor lse_view(void *data, int64_t Sq, int64_t Hq, int64_t B) {
    return fattn_tensor_4d(data, FATTN_F32, B, Hq, Sq, 1, Hq * Sq, Sq, 1, 1);
}

// Stand-in addresses for tensors not allocated yet (size queries read no data; a bias counts as
// given only with a non-NULL pointer). Distinct, 64-byte aligned, never dereferenced.
inline void *fake_data(int i) { return reinterpret_cast<void *>(uintptr_t(1) << 20 | uintptr_t(i) << 12); }
inline void *data_or_fake(const ggml_tensor *t, int i) { return t->data ? t->data : fake_data(i); }

// ------------------------------------------------------------------ input rules (ggml's terms)

inline fattn_status check_layout(const char *name, const ggml_tensor *t) {
    const size_t es = ggml_type_size(t->type);
    if (t->nb[0] != es)
        return fail(FATTN_ERR_BAD_STRIDE, string(name) + ": nb[0] is " + S((int64_t)t->nb[0]) +
                                              " bytes; ne0 must be contiguous (nb[0] = " +
                                              S((int64_t)es) + ")");
    for (int d = 1; d < 4; ++d)
        if (t->nb[d] % es != 0)
            return fail(FATTN_ERR_BAD_STRIDE, string(name) + ": nb[" + S(d) + "] is " +
                                                  S((int64_t)t->nb[d]) +
                                                  " bytes, not a multiple of the element size " +
                                                  S((int64_t)es));
    return FATTN_OK;
}

inline fattn_status check_seqlens(const char *name, const ggml_tensor *cu) {
    if (cu->type != GGML_TYPE_I32)
        return fail(FATTN_ERR_BAD_SEQLENS, string(name) + ": type is " + ggml_type_name(cu->type) +
                                               ", must be I32");
    if (cu->ne[1] != 1 || cu->ne[2] != 1 || cu->ne[3] != 1 || cu->ne[0] < 2)
        return fail(FATTN_ERR_BAD_SEQLENS,
                    string(name) + ": shape is [" + S(cu->ne[0]) + ", " + S(cu->ne[1]) + ", " +
                        S(cu->ne[2]) + ", " + S(cu->ne[3]) + "], must be [num_seqs + 1] (>= 2)");
    if (!ggml_is_contiguous(cu))
        return fail(FATTN_ERR_BAD_SEQLENS, string(name) + ": is not contiguous");
    return FATTN_OK;
}

// An enum field's bits as an int: a caller may store any value there, and loading an
// out-of-range value as the enum type is undefined behaviour.
template <class E>
int raw_enum(const E &e) {
    static_assert(sizeof(E) == sizeof(int), "enum is not int-sized");
    int v;
    std::memcpy(&v, &e, sizeof v);
    return v;
}

// ------------------------------------------------------------------ compute

inline void fill_nan(ggml_tensor *dst) {
    float *d = static_cast<float *>(dst->data);
    const int64_t n = ggml_nelements(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = std::numeric_limits<float>::quiet_NaN();
}

// The node's ggml threads: 1..nth-1 help thread 0's pool; thread 0 makes a CPU context on them,
// makes the call, releases the helpers.
template <class Call>
void drive(Pool *pool, ggml_tensor *dst, int ith, int nth, const char *what, Call &&call) {
    if (ith != 0) {
        pool_help(pool, ith);
        return;
    }
    fattn_ctx_t *fc = nullptr;
    fattn_status s = fattn_ctx_init_cpu(nth, &fc);
    string msg;
    if (s != FATTN_OK) {
        msg = fattn_ctx_last_error(nullptr);
    } else {
        s = fattn_ctx_set_parallel(fc, pool_run, pool);
        if (s == FATTN_OK) s = call(fc);
        if (s != FATTN_OK) msg = fattn_ctx_last_error(fc);
        fattn_ctx_free(fc);
    }
    pool_finish(pool, nth);
    if (s != FATTN_OK) {
        fill_nan(dst);
        record_compute_failure(string(what) + " (" + (dst->name[0] ? dst->name : "?") +
                               "): " + fattn_status_string(s) + ": " + msg);
    }
}

}  // namespace fattn_ggml_detail
