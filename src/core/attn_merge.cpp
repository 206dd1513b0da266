// attn_merge.cpp — fattn_attn_merge: validation of the part views (the shared view rules of
// view_check.h, so statuses and messages are those of the other entry points) and dispatch to
// the context's backend (core/backend.h: the CPU kernel in src/cpu/attn_merge.cpp, the CUDA
// kernel in src/cuda/merge.cu).
//
// Rules in order, the first broken one reported: ctx, n_parts, the arrays, the views' pointers;
// dtypes (valid; every lse f32); shapes (every view agrees with o_out: o [B, S, H, Dv], lse
// [B, H, S, 1]); strides and sizes; data (NULL, alignment); overlap (the outputs share no byte
// with each other or with any part).
#include <cstdint>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/context.h"
#include "core/merge_params.h"
#include "core/view_check.h"

namespace {

using fattn::vc::View;
using fattn::vc::Want;
using std::string;

string S(int64_t x) { return std::to_string(x); }

#define FATTN_MERGE_CHECK(expr)                              \
    do {                                                     \
        fattn_status s_ = (expr);                            \
        if (s_ != FATTN_OK) return fattn::set_error(ctx, s_, why); \
    } while (0)

// Upper bound of n_parts: the part table (host, and device for CUDA) stays far from any size limit.
constexpr int64_t kMaxParts = int64_t(1) << 24;

fattn_status merge(fattn_ctx *ctx, int64_t n_parts, const fattn_tensor *o_parts,
                   const fattn_tensor *lse_parts, const fattn_tensor *o_out,
                   const fattn_tensor *lse_out) {
    string why;
    if (!ctx) return fattn::set_error(ctx, FATTN_ERR_NULL_POINTER, "ctx: is NULL");
    if (n_parts < 1)
        return fattn::set_error(ctx, FATTN_ERR_BAD_VALUE, "n_parts: " + S(n_parts) + ", must be >= 1");
    if (n_parts > kMaxParts)
        return fattn::set_error(ctx, FATTN_ERR_BAD_VALUE,
                                "n_parts: " + S(n_parts) + " is more than " + S(kMaxParts));
    if (!o_parts) return fattn::set_error(ctx, FATTN_ERR_NULL_POINTER, "o_parts: is NULL");
    if (!lse_parts) return fattn::set_error(ctx, FATTN_ERR_NULL_POINTER, "lse_parts: is NULL");
    if (!o_out) return fattn::set_error(ctx, FATTN_ERR_NULL_POINTER, "o_out: tensor pointer is NULL");
    if (!lse_out) return fattn::set_error(ctx, FATTN_ERR_NULL_POINTER, "lse_out: tensor pointer is NULL");

    // Views: o_out, lse_out, then o_parts[i], lse_parts[i] in part order (names built first: the
    // views keep pointers into them).
    const size_t n = size_t(n_parts);
    std::vector<string> names;
    names.reserve(2 * n);
    for (size_t i = 0; i < n; ++i) {
        names.push_back("o_parts[" + std::to_string(i) + "]");
        names.push_back("lse_parts[" + std::to_string(i) + "]");
    }
    std::vector<View> views;
    views.reserve(2 * n + 2);
    views.push_back(View{"o_out", o_out, true});
    views.push_back(View{"lse_out", lse_out, true, 2});
    for (size_t i = 0; i < n; ++i) {
        views.push_back(View{names[2 * i].c_str(), &o_parts[i], false});
        views.push_back(View{names[2 * i + 1].c_str(), &lse_parts[i], false, 2});
    }
    const int nv = int(views.size());

    // ---- dtypes ----
    for (const View &v : views) FATTN_MERGE_CHECK(fattn::vc::check_dtype_valid(v, &why));
    for (const View &v : views)
        if (v.inner == 2) FATTN_MERGE_CHECK(fattn::vc::check_dtype_is(v, FATTN_F32, nullptr, &why));

    // ---- shapes ----
    const fattn_tensor &o = *o_out;
    const int64_t B = o.ne[0], Sq = o.ne[1], H = o.ne[2], Dv = o.ne[3];
    {
        const Want free{0, nullptr};
        const Want wout[4] = {free, free, free, free};
        const Want wo[4] = {{B, "o_out"}, {Sq, "o_out"}, {H, "o_out"}, {Dv, "o_out"}};
        const Want wl[4] = {{B, "o_out"}, {H, "o_out"}, {Sq, "o_out"}, {1, ""}};
        FATTN_MERGE_CHECK(fattn::vc::check_shape(views[0], wout, &why));
        for (int i = 1; i < nv; ++i)
            FATTN_MERGE_CHECK(fattn::vc::check_shape(views[i], views[i].inner == 2 ? wl : wo, &why));
    }

    // ---- strides and sizes, data, overlap ----
    for (const View &v : views) FATTN_MERGE_CHECK(fattn::vc::check_strides(v, &why));
    for (const View &v : views) FATTN_MERGE_CHECK(fattn::vc::check_data(v, &why));
    FATTN_MERGE_CHECK(fattn::vc::check_overlaps(views.data(), nv, &why));

    const int64_t rows = B * Sq * H;  // each dim's view fits in 2^63 bytes: no wrap
    if (rows == 0) return FATTN_OK;

    // ---- resolve ----
    using fattn::vc::step;
    std::vector<fattn::MergePart> parts(n);
    for (size_t i = 0; i < n; ++i) {
        const fattn_tensor &po = o_parts[i], &pl = lse_parts[i];
        fattn::MergePart &q = parts[i];
        q.o = po.data;
        q.o_sb = step(po, 0); q.o_ss = step(po, 1); q.o_sh = step(po, 2);
        q.lse = static_cast<const float *>(pl.data);
        q.lse_sb = step(pl, 0); q.lse_sh = step(pl, 1);
        q.dtype = int32_t(po.dtype);
        q.pad_ = 0;
    }
    fattn::MergeParams p{};
    p.batch = B; p.seq = Sq; p.heads = H; p.dim_v = Dv;
    p.n_parts = n_parts;
    p.parts = parts.data();
    p.o = o.data; p.o_sb = step(o, 0); p.o_ss = step(o, 1); p.o_sh = step(o, 2);
    p.o_dtype = o.dtype;
    p.lse = static_cast<float *>(lse_out->data);
    p.lse_sb = step(*lse_out, 0); p.lse_sh = step(*lse_out, 1);
    p.nthreads = ctx->nthreads;
    p.stream = ctx->stream;

    const fattn::BackendTable *b = fattn::backend_of(ctx, &why);
    if (!b) return fattn::set_error(ctx, FATTN_ERR_BACKEND_UNAVAILABLE, why);
    string err;
    fattn_status s = b->attn_merge(ctx, p, &err);
    if (s != FATTN_OK) return fattn::set_error(ctx, s, err.empty() ? "merge: backend failed" : err);
    return FATTN_OK;
}

}  // namespace

extern "C" fattn_status fattn_attn_merge(fattn_ctx_t *ctx, int64_t n_parts,
                                         const fattn_tensor *o_parts,
                                         const fattn_tensor *lse_parts,
                                         const fattn_tensor *o_out,
                                         const fattn_tensor *lse_out) {
    return fattn::guarded(ctx, "fattn_attn_merge",
                          [&] { return merge(ctx, n_parts, o_parts, lse_parts, o_out, lse_out); });
}
