// attn_memory.cpp — the memory model of softmax attention (DESIGN §8): bytes one call keeps and
// needs, from the views' dense extents and the backend's own size functions (the very numbers
// dispatch allocates), and "the longest S that fits in N bytes" by binary search over S.
// The workspace fields are the backend's *_workspace_size plus, on a CPU context, a small
// allowance for the host heap a call takes on its own, so that the peaks never under-predict a
// measured call (checked in tests/test_memory.cpp against a heap-counting run).
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <new>
#include <string>

#include "core/attn_dispatch.h"
#include "core/attn_validate.h"
#include "core/enum_raw.h"

namespace {

using i128 = __int128;

constexpr int64_t kMaxSearchS = INT32_MAX;  // longest S max_seqlen reports (int32 cu_seqlens range)

// Host heap a CPU call takes besides its workspace: thread handles, the task index, a slot pool.
// Measured at 120 B (exact) and ~2 KiB (fused) for 2 threads, 1 sequence (tests/test_memory.cpp,
// Memory.ModelCoversMeasuredPeak); the allowance keeps the model from under-predicting with
// room to spare while staying far below 15% of any real call. A CUDA call's device peak has no
// such term (its host bookkeeping is not device memory).
int64_t host_allowance(const fattn_ctx *ctx, const fattn::AttnFwdParams &p) {
    if (ctx->backend != FATTN_BACKEND_CPU) return 0;
    return 16384 + 1024 * int64_t(ctx->nthreads) + 16 * p.batch;
}

// Bytes of the dense data a view describes: broadcast (stride 0) dims hold one copy.
i128 dense_bytes(const fattn_tensor &t) {
    // Clamped at 2^100 per step: a (self-overlapping) input view may describe more elements
    // than 128 bits hold; anything that large saturates the uint64 fields anyway.
    const i128 cap = i128(1) << 100;
    i128 n = i128(fattn_dtype_size(t.dtype));
    for (int d = 0; d < 4; ++d) {
        n *= (t.nb[d] == 0 ? std::min<int64_t>(t.ne[d], 1) : t.ne[d]);
        if (n > cap) n = cap;
    }
    return n;
}

// Product of dims, clamped like dense_bytes.
i128 prod(std::initializer_list<int64_t> dims) {
    i128 n = 1;
    for (int64_t x : dims) {
        n *= x;
        if (n > (i128(1) << 100)) n = i128(1) << 100;
    }
    return n;
}

uint64_t sat(i128 x) { return x > i128(UINT64_MAX) ? UINT64_MAX : uint64_t(x); }

// The model, shared by fattn_attn_memory and the S search. The error (if any) is recorded on ctx.
fattn_status model(fattn_ctx *ctx, const fattn_attn_params *p, const fattn_tensor *q,
                   const fattn_tensor *k, const fattn_tensor *v, fattn_attn_memory_info *out,
                   uint32_t want = 0) {
    fattn::AttnViews vw;
    vw.q = q; vw.k = k; vw.v = v;
    vw.want = want;
    fattn::AttnResolved r;
    std::string why;
    fattn_status s = fattn::attn_validate(ctx, p, fattn::AttnOp::QUERY, vw, true, &r, &why);
    if (s != FATTN_OK) return fattn::set_error(ctx, s, why);
    const fattn::AttnFwdParams &fp = r.p;
    const i128 es = i128(fattn_dtype_size(fp.dtype));
    const int64_t B = q->ne[0];
    const i128 o_bytes = prod({B, fp.total_q, fp.hq, fp.dim_v}) * es;
    const i128 lse_bytes = prod({B, fp.hq, fp.total_q}) * 4;
    const i128 q_bytes = prod({B, fp.total_q, fp.hq, fp.d}) * es;  // dense, like dq
    const i128 k_bytes = prod({B, fp.total_kv, fp.hkv, fp.d}) * es;
    const i128 v_bytes = prod({B, fp.total_kv, fp.hkv, fp.dim_v}) * es;
    i128 inputs = dense_bytes(*q) + dense_bytes(*k) + dense_bytes(*v);
    if (p->bias.data) inputs += dense_bytes(p->bias);
    i128 saved_buf = 0, ws_f = 0, ws_b = 0;
    if (r.work == fattn::AttnWork::COMPUTE) {
        saved_buf = fattn::attn_backend_saved_size(ctx, fp);
        ws_f = fattn::attn_backend_workspace_size(ctx, fp, FATTN_DIR_FWD);
        ws_b = fattn::attn_backend_workspace_size(ctx, fp, FATTN_DIR_BWD);
        // Workspace fields: the backend's scratch, plus what the call allocates on its own.
        ws_f += host_allowance(ctx, fp);
        ws_b += host_allowance(ctx, fp);
    }
    const i128 saved = o_bytes + lse_bytes + saved_buf;
    i128 grads = o_bytes + q_bytes + k_bytes + v_bytes;  // dout, dq, dk, dv
    if (fp.want_dbias)  // dbias: f32, the bias's shape reduced over its broadcast dims
        grads += prod({fp.bias_sb ? B : 1, fp.bias_sh ? fp.hq : 1, fp.bias_si ? fp.total_q : 1,
                       fp.total_kv}) * 4;
    out->inputs_bytes = sat(inputs);
    out->saved_bytes = sat(saved);
    out->fwd_workspace_bytes = sat(ws_f);
    out->bwd_workspace_bytes = sat(ws_b);
    out->grads_bytes = sat(grads);
    out->fwd_peak_bytes = sat(inputs + saved + ws_f);
    out->bwd_peak_bytes = sat(inputs + saved + grads + ws_b);
    return FATTN_OK;
}

using fattn::guarded;

}  // namespace

extern "C" {

fattn_status fattn_attn_memory(fattn_ctx_t *ctx, const fattn_attn_params *p, const fattn_tensor *q,
                               const fattn_tensor *k, const fattn_tensor *v,
                               fattn_attn_memory_info *out) {
    return guarded(ctx, "fattn_attn_memory", [&] {
        if (!out) return fattn::set_error(ctx, FATTN_ERR_NULL_POINTER, "out: is NULL");
        *out = fattn_attn_memory_info{};
        return model(ctx, p, q, k, v, out);
    });
}

fattn_status fattn_attn_memory_ex(fattn_ctx_t *ctx, const fattn_attn_params *p, const fattn_tensor *q,
                                  const fattn_tensor *k, const fattn_tensor *v, uint32_t want,
                                  fattn_attn_memory_info *out) {
    return guarded(ctx, "fattn_attn_memory", [&] {
        if (!out) return fattn::set_error(ctx, FATTN_ERR_NULL_POINTER, "out: is NULL");
        *out = fattn_attn_memory_info{};
        return model(ctx, p, q, k, v, out, want);
    });
}

fattn_status fattn_attn_max_seqlen(fattn_ctx_t *ctx, const fattn_attn_params *p, fattn_dtype dtype,
                                   int64_t B, int64_t Hq, int64_t Hkv, int64_t D, int64_t Dv,
                                   uint64_t budget_bytes, int64_t *max_s) {
    return guarded(ctx, "fattn_attn_max_seqlen", [&] {
        if (!max_s) return fattn::set_error(ctx, FATTN_ERR_NULL_POINTER, "max_s: is NULL");
        *max_s = 0;
        if (!ctx) return fattn::set_error(ctx, FATTN_ERR_NULL_POINTER, "ctx: is NULL");
        if (!p) return fattn::set_error(ctx, FATTN_ERR_NULL_POINTER, "params: is NULL");
        if (B < 1 || Hq < 1 || Hkv < 1)
            return fattn::set_error(ctx, FATTN_ERR_BAD_VALUE,
                                    "B, Hq, Hkv: must be >= 1 (got " + std::to_string(B) + ", " +
                                        std::to_string(Hq) + ", " + std::to_string(Hkv) + ")");
        // Enum arguments are read raw: a C caller may pass any int (loading it as the enum
        // would be undefined); the first model() call reports bad params fields.
        const int64_t rdt = fattn::raw_enum(dtype);
        if (rdt != FATTN_F32 && rdt != FATTN_F16 && rdt != FATTN_BF16)
            return fattn::set_error(ctx, FATTN_ERR_BAD_VALUE,
                                    "dtype: " + std::to_string(rdt) + " is not a fattn_dtype");
        const bool exact = fattn::raw_enum(p->algo) == FATTN_ALGO_EXACT;
        // Self-attention at S, dense: the search ignores any varlen description in p.
        fattn_attn_params lp = *p;
        lp.cu_seqlens_q = lp.cu_seqlens_kv = nullptr;
        lp.num_seqs = lp.max_seqlen_q = lp.max_seqlen_kv = 0;

        // fits(S): 1 fits, 0 does not, <0 an error status (negated).
        auto fits = [&](int64_t S) -> int {
            // EXACT keeps B·Hq·S² probabilities (4 bytes each on every backend); past 2^62 of
            // them no 64-bit budget holds them and the backend's size would wrap.
            // (long double: B and Hq are arbitrary int64, their product with S² overflows i128.)
            if (exact && (long double)B * Hq * S * S > (long double)(i128(1) << 62)) return 0;
            fattn_tensor q = fattn_tensor_contiguous(nullptr, dtype, B, S, Hq, D);
            fattn_tensor k = fattn_tensor_contiguous(nullptr, dtype, B, S, Hkv, D);
            fattn_tensor v = fattn_tensor_contiguous(nullptr, dtype, B, S, Hkv, Dv);
            if (p->bias.data) {
                // Same broadcast pattern as the caller's bias, at S x S.
                const fattn_tensor &ub = p->bias;
                int64_t n[4] = {ub.ne[0] == 1 ? 1 : B, ub.ne[1] == 1 ? 1 : Hq, S, S};
                int64_t st[4];
                i128 run = 1;  // a dense bias of B·Hq·S² elements may not be addressable at all
                for (int d = 3; d >= 0; --d) {
                    bool bcast = (d < 3 && ub.nb[d] == 0) || n[d] == 1;
                    st[d] = bcast ? 0 : int64_t(run);
                    if (!bcast) run *= n[d];
                    if (run > i128(INT64_MAX)) return 0;  // does not fit any budget
                }
                st[3] = 1;
                lp.bias = ub;  // a struct copy: the dtype bytes travel unloaded (model checks them)
                for (int d = 0; d < 4; ++d) lp.bias.ne[d] = n[d], lp.bias.nb[d] = st[d];
            }
            fattn_attn_memory_info m;
            fattn_status s = model(ctx, &lp, &q, &k, &v, &m);
            if (s != FATTN_OK) return -int(s);
            return m.bwd_peak_bytes <= budget_bytes ? 1 : 0;
        };

        int f = fits(1);
        if (f < 0) return fattn_status(-f);
        if (f == 0) return FATTN_OK;  // not even S = 1
        // Double until it no longer fits, then bisect [good, bad).
        int64_t good = 1, bad = 0;
        while (bad == 0) {
            int64_t next = good > kMaxSearchS / 2 ? kMaxSearchS : good * 2;
            f = fits(next);
            if (f < 0) return fattn_status(-f);
            if (f == 1) {
                good = next;
                if (good == kMaxSearchS) break;
            } else {
                bad = next;
            }
        }
        while (bad != 0 && bad - good > 1) {
            int64_t mid = good + (bad - good) / 2;
            f = fits(mid);
            if (f < 0) return fattn_status(-f);
            (f == 1 ? good : bad) = mid;
        }
        *max_s = good;
        return FATTN_OK;
    });
}

}  // extern "C"
