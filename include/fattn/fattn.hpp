/*
 * fattn.hpp — thin header-only C++17 wrapper over the C API in fattn.h.
 *
 *   fattn::Context ctx = fattn::Context::cpu(4);           // RAII: freed by the destructor
 *   fattn::AttnParams p;  p.causal = FATTN_CAUSAL_BOTTOM_RIGHT;
 *   auto q = fattn::Tensor::contiguous(q_ptr, FATTN_BF16, B, S, H, D);
 *   ctx.attn_fwd(p, q, k, v, o, lse);                        // throws fattn::Error on failure
 *
 * Every method returns a fattn_status. By default a failure throws fattn::Error (status + the
 * library's message), so the return value is always FATTN_OK. Define FATTN_NO_EXCEPTIONS before
 * including this header to get the status back instead (then read ctx.last_error()).
 * fattn_attn_supports is a question, not a failure: supports() never throws.
 */
#ifndef FATTN_FATTN_HPP
#define FATTN_FATTN_HPP

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "fattn/fattn.h"

#ifndef FATTN_NO_EXCEPTIONS
#include <stdexcept>
#endif

namespace fattn {
// The two error modes live in distinct inline namespaces, so translation units built with and
// without FATTN_NO_EXCEPTIONS can share a program without violating the one-definition rule.
#ifndef FATTN_NO_EXCEPTIONS
inline namespace exc {
#else
inline namespace noexc {
#endif

#ifndef FATTN_NO_EXCEPTIONS
// A failed call: the status and the message naming the argument and the rule.
class Error : public std::runtime_error {
public:
    Error(fattn_status status, const std::string &message)
        : std::runtime_error(std::string(fattn_status_string(status)) + ": " + message),
          status_(status), message_(message) {}
    fattn_status status() const noexcept { return status_; }
    const std::string &message() const noexcept { return message_; }

private:
    fattn_status status_;
    std::string message_;
};
#endif

namespace detail {
// Throws (or passes the status through with FATTN_NO_EXCEPTIONS) on a failed call.
inline fattn_status check(fattn_status s, const fattn_ctx_t *ctx) {
#ifndef FATTN_NO_EXCEPTIONS
    if (s != FATTN_OK) throw Error(s, fattn_ctx_last_error(ctx));
#else
    (void)ctx;
#endif
    return s;
}
}  // namespace detail

// A tensor view (fattn_tensor) with constructors; passes wherever a fattn_tensor* is expected.
struct Tensor : fattn_tensor {
    Tensor() : fattn_tensor(fattn_tensor_none()) {}
    Tensor(const fattn_tensor &t) : fattn_tensor(t) {}  // NOLINT: implicit by design

    // Row-major [n0, n1, n2, n3] (logical [B, S, H, D]; lse: [B, Hq, Sq, 1]).
    static Tensor contiguous(void *data, fattn_dtype dtype, int64_t n0, int64_t n1, int64_t n2,
                             int64_t n3) {
        return Tensor(fattn_tensor_contiguous(data, dtype, n0, n1, n2, n3));
    }
    // Explicit element strides s0..s3 (s3 must be 1; 0 broadcasts an input dim).
    static Tensor strided(void *data, fattn_dtype dtype, int64_t n0, int64_t n1, int64_t n2,
                          int64_t n3, int64_t s0, int64_t s1, int64_t s2, int64_t s3 = 1) {
        return Tensor(fattn_tensor_4d(data, dtype, n0, n1, n2, n3, s0, s1, s2, s3));
    }
    static Tensor none() { return Tensor(); }

    int64_t numel() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    size_t element_size() const { return fattn_dtype_size(dtype); }
};

// fattn_attn_params initialised to fattn_attn_params_default() (scale 1/sqrt(D), no masks,
// prec AUTO, algo FUSED); set the public fields directly.
struct AttnParams : fattn_attn_params {
    AttnParams() : fattn_attn_params(fattn_attn_params_default()) {}
};

// Owns one fattn_ctx_t. Move-only.
class Context {
public:
    static Context cpu(int nthreads = 0) {
        fattn_ctx_t *c = nullptr;
        fattn_status s = fattn_ctx_init_cpu(nthreads, &c);
        detail::check(s, nullptr);
        return Context(c, s);
    }
    // stream: a cudaStream_t (nullptr = legacy default stream).
    static Context cuda(int device = 0, void *stream = nullptr) {
        fattn_ctx_t *c = nullptr;
        fattn_status s = fattn_ctx_init_cuda(device, stream, &c);
        detail::check(s, nullptr);
        return Context(c, s);
    }

    Context(Context &&o) noexcept : ctx_(std::exchange(o.ctx_, nullptr)), init_(o.init_) {}
    Context &operator=(Context &&o) noexcept {
        if (this != &o) {
            fattn_ctx_free(ctx_);
            ctx_ = std::exchange(o.ctx_, nullptr);
            init_ = o.init_;
        }
        return *this;
    }
    Context(const Context &) = delete;
    Context &operator=(const Context &) = delete;
    ~Context() { fattn_ctx_free(ctx_); }

    // With FATTN_NO_EXCEPTIONS a failed init gives an empty Context: check valid() / init_status().
    bool valid() const { return ctx_ != nullptr; }
    fattn_status init_status() const { return init_; }
    fattn_ctx_t *get() const { return ctx_; }

    fattn_backend backend() const { return fattn_ctx_backend(ctx_); }
    int nthreads() const { return fattn_ctx_nthreads(ctx_); }
    std::string last_error() const { return fattn_ctx_last_error(ctx_); }

    fattn_status set_nthreads(int n) { return detail::check(fattn_ctx_set_nthreads(ctx_, n), ctx_); }
    // CPU: run fattn's parallel loops on the caller's thread pool (fattn_ctx_set_parallel).
    fattn_status set_parallel(fattn_parallel_fn run, void *user) {
        return detail::check(fattn_ctx_set_parallel(ctx_, run, user), ctx_);
    }
    fattn_status set_stream(void *stream) {
        return detail::check(fattn_ctx_set_stream(ctx_, stream), ctx_);
    }
    fattn_status set_allocator(fattn_alloc_fn alloc, fattn_free_fn free_fn, void *user) {
        return detail::check(fattn_ctx_set_allocator(ctx_, alloc, free_fn, user), ctx_);
    }

    // ---- softmax attention ----

    fattn_prec resolve_prec(const fattn_attn_params &p, const fattn_tensor &q) const {
        return fattn_resolve_prec(ctx_, &p, &q);
    }
    // A question: never throws. why (optional) gets the reason when the answer is not FATTN_OK.
    fattn_status supports(const fattn_attn_params &p, const fattn_tensor &q, const fattn_tensor &k,
                          const fattn_tensor &v, std::string *why = nullptr) const {
        fattn_status s = fattn_attn_supports(ctx_, &p, &q, &k, &v, nullptr, 0);
        if (why) *why = s == FATTN_OK ? std::string() : std::string(fattn_ctx_last_error(ctx_));
        return s;
    }
    fattn_status workspace_size(const fattn_attn_params &p, const fattn_tensor &q,
                                const fattn_tensor &k, const fattn_tensor &v, fattn_dir dir,
                                size_t *bytes) const {
        return detail::check(fattn_attn_workspace_size(ctx_, &p, &q, &k, &v, dir, bytes), ctx_);
    }
    fattn_status saved_size(const fattn_attn_params &p, const fattn_tensor &q,
                            const fattn_tensor &k, const fattn_tensor &v, size_t *bytes) const {
        return detail::check(fattn_attn_saved_size(ctx_, &p, &q, &k, &v, bytes), ctx_);
    }
    fattn_status memory(const fattn_attn_params &p, const fattn_tensor &q, const fattn_tensor &k,
                        const fattn_tensor &v, fattn_attn_memory_info *out) const {
        return detail::check(fattn_attn_memory(ctx_, &p, &q, &k, &v, out), ctx_);
    }
    // want: FATTN_ATTN_WANT_* bits (fattn.h: fattn_attn_memory_ex).
    fattn_status memory(const fattn_attn_params &p, const fattn_tensor &q, const fattn_tensor &k,
                        const fattn_tensor &v, uint32_t want, fattn_attn_memory_info *out) const {
        return detail::check(fattn_attn_memory_ex(ctx_, &p, &q, &k, &v, want, out), ctx_);
    }
    fattn_status max_seqlen(const fattn_attn_params &p, fattn_dtype dtype, int64_t B, int64_t Hq,
                            int64_t Hkv, int64_t D, int64_t Dv, uint64_t budget_bytes,
                            int64_t *max_s) const {
        return detail::check(
            fattn_attn_max_seqlen(ctx_, &p, dtype, B, Hq, Hkv, D, Dv, budget_bytes, max_s), ctx_);
    }
    // workspace == nullptr: the context allocates (and frees) it.
    fattn_status attn_fwd(const fattn_attn_params &p, const fattn_tensor &q, const fattn_tensor &k,
                          const fattn_tensor &v, const fattn_tensor &o, const fattn_tensor &lse,
                          void *saved = nullptr, void *workspace = nullptr,
                          size_t workspace_bytes = 0) {
        return detail::check(fattn_attn_fwd(ctx_, &p, &q, &k, &v, &o, &lse, saved, workspace,
                                            workspace_bytes),
                             ctx_);
    }
    fattn_status attn_bwd(const fattn_attn_params &p, const fattn_tensor &q, const fattn_tensor &k,
                          const fattn_tensor &v, const fattn_tensor &o, const fattn_tensor &lse,
                          const void *saved, const fattn_tensor &dout, const fattn_tensor &dq,
                          const fattn_tensor &dk, const fattn_tensor &dv,
                          void *workspace = nullptr, size_t workspace_bytes = 0) {
        return detail::check(fattn_attn_bwd(ctx_, &p, &q, &k, &v, &o, &lse, saved, &dout, &dq, &dk,
                                            &dv, workspace, workspace_bytes),
                             ctx_);
    }
    // The backward with the bias gradient (fattn.h: fattn_attn_bwd_ex; CPU contexts).
    fattn_status attn_bwd_dbias(const fattn_attn_params &p, const fattn_tensor &q,
                                const fattn_tensor &k, const fattn_tensor &v, const fattn_tensor &o,
                                const fattn_tensor &lse, const void *saved,
                                const fattn_tensor &dout, const fattn_tensor &dq,
                                const fattn_tensor &dk, const fattn_tensor &dv,
                                const fattn_tensor &dbias, void *workspace = nullptr,
                                size_t workspace_bytes = 0) {
        return detail::check(fattn_attn_bwd_ex(ctx_, &p, &q, &k, &v, &o, &lse, saved, &dout, &dq,
                                               &dk, &dv, &dbias, workspace, workspace_bytes),
                             ctx_);
    }

private:
    Context(fattn_ctx_t *c, fattn_status s) : ctx_(c), init_(s) {}
    fattn_ctx_t *ctx_ = nullptr;
    fattn_status init_ = FATTN_OK;
};

}  // inline namespace exc / noexc
}  // namespace fattn

#endif /* FATTN_FATTN_HPP */
