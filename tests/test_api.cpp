// test_api.cpp — the C API around the kernels: version, status/enum names, tensor constructors,
// context lifecycle and setters, last-error scoping (per context / per thread), allocator plumbing,
// precision resolution, params defaults, and the C++ wrapper (fattn.hpp). The last tests run a
// real forward/backward through the API and check API-level properties (views of a fused buffer
// give the same bits as separate buffers; a custom allocator is the one used).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/context.h"
#include "fattn/fattn.h"
#include "fattn/fattn.hpp"

namespace {

TEST(Api, VersionMatchesMacros) {
    std::string want = std::to_string(FATTN_VERSION_MAJOR) + "." +
                       std::to_string(FATTN_VERSION_MINOR) + "." +
                       std::to_string(FATTN_VERSION_PATCH);
    EXPECT_EQ(std::string(fattn_version()), want);
}

TEST(Api, StatusStringsDistinct) {
    std::set<std::string> seen;
    for (int s = FATTN_OK; s <= FATTN_ERR_INTERNAL; ++s) {
        const char *str = fattn_status_string(fattn_status(s));
        ASSERT_NE(str, nullptr);
        EXPECT_TRUE(seen.insert(str).second) << "duplicate: " << str;
    }
}

TEST(Api, EnumNamesAndSizes) {
    EXPECT_STREQ(fattn_dtype_name(FATTN_BF16), "bf16");
    EXPECT_EQ(fattn_dtype_size(FATTN_F32), 4u);
    EXPECT_EQ(fattn_dtype_size(FATTN_F16), 2u);
    EXPECT_EQ(fattn_dtype_size(FATTN_BF16), 2u);
    EXPECT_STREQ(fattn_prec_name(FATTN_PREC_TF32), "tf32");
    EXPECT_STREQ(fattn_algo_name(FATTN_ALGO_EXACT), "exact");
}

TEST(Api, TensorConstructors) {
    float x;
    fattn_tensor t = fattn_tensor_contiguous(&x, FATTN_F16, 2, 3, 4, 5);
    EXPECT_EQ(t.data, &x);
    EXPECT_EQ(t.dtype, FATTN_F16);
    EXPECT_EQ(t.nb[0], 60);
    EXPECT_EQ(t.nb[1], 20);
    EXPECT_EQ(t.nb[2], 5);
    EXPECT_EQ(t.nb[3], 1);
    fattn_tensor s = fattn_tensor_4d(&x, FATTN_F32, 1, 2, 3, 4, 100, 40, 8, 1);
    EXPECT_EQ(s.ne[2], 3);
    EXPECT_EQ(s.nb[1], 40);
    fattn_tensor n = fattn_tensor_none();
    EXPECT_EQ(n.data, nullptr);
}

TEST(Api, ParamsDefault) {
    fattn_attn_params p = fattn_attn_params_default();
    EXPECT_EQ(p.scale, 0.0f);
    EXPECT_EQ(p.bias.data, nullptr);
    EXPECT_EQ(p.causal, FATTN_CAUSAL_NONE);
    EXPECT_EQ(p.window_left, -1);
    EXPECT_EQ(p.window_right, -1);
    EXPECT_EQ(p.cu_seqlens_q, nullptr);
    EXPECT_EQ(p.prec, FATTN_PREC_AUTO);
    EXPECT_EQ(p.algo, FATTN_ALGO_FUSED);
}

TEST(Api, CpuContextLifecycle) {
    fattn_ctx_t *ctx = nullptr;
    ASSERT_EQ(fattn_ctx_init_cpu(3, &ctx), FATTN_OK);
    EXPECT_EQ(fattn_ctx_backend(ctx), FATTN_BACKEND_CPU);
    EXPECT_EQ(fattn_ctx_nthreads(ctx), 3);
    EXPECT_EQ(fattn_ctx_set_nthreads(ctx, 0), FATTN_OK);  // 0: hardware concurrency, >= 1
    EXPECT_GE(fattn_ctx_nthreads(ctx), 1);
    EXPECT_EQ(fattn_ctx_set_stream(ctx, nullptr), FATTN_ERR_BAD_VALUE);
    EXPECT_NE(std::string(fattn_ctx_last_error(ctx)).find("stream"), std::string::npos);
    fattn_ctx_free(ctx);
    fattn_ctx_free(nullptr);  // like free(NULL)
    EXPECT_EQ(fattn_ctx_init_cpu(1, nullptr), FATTN_ERR_NULL_POINTER);
}

TEST(Api, CudaContextWithoutCudaOrDevice) {
    fattn_ctx_t *ctx = nullptr;
    fattn_status s = fattn_ctx_init_cuda(0, nullptr, &ctx);
    if (s == FATTN_OK) {
        EXPECT_EQ(fattn_ctx_backend(ctx), FATTN_BACKEND_CUDA);
        fattn_ctx_free(ctx);
        GTEST_SKIP() << "a CUDA device is present: the unavailable path is not reachable here";
    }
    EXPECT_EQ(s, FATTN_ERR_BACKEND_UNAVAILABLE);
    EXPECT_EQ(ctx, nullptr);
    std::string msg = fattn_ctx_last_error(nullptr);
#ifndef FATTN_WITH_CUDA
    EXPECT_NE(msg.find("built without CUDA"), std::string::npos) << msg;
#else
    EXPECT_FALSE(msg.empty());
#endif
}

// On a machine with a CUDA device: the context reports its backend and the device's AUTO
// precision, rejects CPU-only setters, allocates device workspace by default, and applies the
// CUDA-only varlen rule (max_seqlen must be given: cu_seqlens are device memory).
TEST(Api, CudaContextRules) {
    fattn_ctx_t *ctx = nullptr;
    if (fattn_ctx_init_cuda(0, nullptr, &ctx) != FATTN_OK)
        GTEST_SKIP() << "no CUDA device: " << fattn_ctx_last_error(nullptr);
    EXPECT_EQ(fattn_ctx_backend(ctx), FATTN_BACKEND_CUDA);
    EXPECT_EQ(fattn_ctx_set_nthreads(ctx, 4), FATTN_ERR_BAD_VALUE);
    EXPECT_EQ(fattn_ctx_set_stream(ctx, nullptr), FATTN_OK);
    fattn_attn_params p = fattn_attn_params_default();
    fattn_tensor q = fattn_tensor_contiguous(nullptr, FATTN_F32, 1, 64, 2, 64);
    EXPECT_EQ(fattn_resolve_prec(ctx, &p, &q), ctx->sm_major >= 8 ? FATTN_PREC_TF32 : FATTN_PREC_F32);
    q.dtype = FATTN_BF16;
    EXPECT_EQ(fattn_resolve_prec(ctx, &p, &q), FATTN_PREC_NATIVE);
    void *d = fattn::ctx_alloc(ctx, 1 << 20);
    EXPECT_NE(d, nullptr);
    fattn::ctx_free(ctx, d);
    // Varlen on CUDA: the host cannot read cu_seqlens, so max_seqlen_q/kv are required.
    int32_t fake_device_ptr[2] = {0, 64};  // never dereferenced by the core on a CUDA context
    p.cu_seqlens_q = p.cu_seqlens_kv = fake_device_ptr;
    p.num_seqs = 1;
    char why[256];
    EXPECT_EQ(fattn_attn_supports(ctx, &p, &q, &q, &q, why, sizeof why), FATTN_ERR_BAD_SEQLENS);
    EXPECT_NE(std::string(why).find("max_seqlen_q"), std::string::npos) << why;
    p.max_seqlen_q = p.max_seqlen_kv = 64;
    fattn_status s = fattn_attn_supports(ctx, &p, &q, &q, &q, why, sizeof why);
    EXPECT_TRUE(s == FATTN_OK || s == FATTN_ERR_UNSUPPORTED) << fattn_status_string(s) << ": " << why;
    // Explicit strict F32 is never silently changed.
    p = fattn_attn_params_default();
    p.prec = FATTN_PREC_F32;
    q.dtype = FATTN_F32;
    EXPECT_EQ(fattn_resolve_prec(ctx, &p, &q), FATTN_PREC_F32);
    fattn_ctx_free(ctx);
}

TEST(Api, ThreadLocalLastError) {
    fattn_ctx_init_cpu(1, nullptr);  // fails: message on this thread
    std::string here = fattn_ctx_last_error(nullptr);
    EXPECT_NE(here.find("out_ctx"), std::string::npos);
    std::string there = "unset";
    std::thread([&] { there = fattn_ctx_last_error(nullptr); }).join();
    EXPECT_EQ(there, "");  // another thread's failures are not ours
}

TEST(Api, AllocatorSetters) {
    fattn_ctx_t *ctx = nullptr;
    ASSERT_EQ(fattn_ctx_init_cpu(1, &ctx), FATTN_OK);
    auto a = [](size_t n, void *) -> void * { return std::malloc(n); };
    auto f = [](void *ptr, void *) { std::free(ptr); };
    EXPECT_EQ(fattn_ctx_set_allocator(ctx, a, nullptr, nullptr), FATTN_ERR_NULL_POINTER);
    EXPECT_NE(std::string(fattn_ctx_last_error(ctx)).find("free_fn"), std::string::npos);
    EXPECT_EQ(fattn_ctx_set_allocator(ctx, a, f, nullptr), FATTN_OK);
    EXPECT_EQ(fattn_ctx_set_allocator(ctx, nullptr, nullptr, nullptr), FATTN_OK);  // default again
    fattn_ctx_free(ctx);
}

struct Counter {
    int allocs = 0, frees = 0;
    size_t bytes = 0;
};
void *count_alloc(size_t n, void *user) {
    auto *c = static_cast<Counter *>(user);
    ++c->allocs;
    c->bytes += n;
    return std::malloc(n);
}
void count_free(void *p, void *user) {
    ++static_cast<Counter *>(user)->frees;
    std::free(p);
}

TEST(Api, CtxAllocUsesCallerAllocatorAndAlignsDefault) {
    fattn_ctx_t *ctx = nullptr;
    ASSERT_EQ(fattn_ctx_init_cpu(1, &ctx), FATTN_OK);
    void *p = fattn::ctx_alloc(ctx, 100);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);  // default host allocator: 64-byte aligned
    fattn::ctx_free(ctx, p);
    Counter c;
    ASSERT_EQ(fattn_ctx_set_allocator(ctx, count_alloc, count_free, &c), FATTN_OK);
    p = fattn::ctx_alloc(ctx, 77);
    fattn::ctx_free(ctx, p);
    EXPECT_EQ(c.allocs, 1);
    EXPECT_EQ(c.frees, 1);
    EXPECT_EQ(c.bytes, 77u);
    fattn_ctx_free(ctx);
}

TEST(Api, ResolvePrecOnCpu) {
    fattn_ctx_t *ctx = nullptr;
    ASSERT_EQ(fattn_ctx_init_cpu(1, &ctx), FATTN_OK);
    fattn_attn_params p = fattn_attn_params_default();
    fattn_tensor q = fattn_tensor_contiguous(nullptr, FATTN_F32, 1, 1, 1, 8);
    EXPECT_EQ(fattn_resolve_prec(ctx, &p, &q), FATTN_PREC_F32);
    q.dtype = FATTN_BF16;
    EXPECT_EQ(fattn_resolve_prec(ctx, &p, &q), FATTN_PREC_F32);  // CPU: f32 arithmetic
    p.prec = FATTN_PREC_TF32;
    EXPECT_EQ(fattn_resolve_prec(ctx, &p, &q), FATTN_PREC_TF32);  // explicit: as is, never AUTO
    EXPECT_NE(fattn_resolve_prec(ctx, nullptr, nullptr), FATTN_PREC_AUTO);
    fattn_ctx_free(ctx);
}

// A CUDA context's AUTO rule, checked on a hand-built context (no device needed).
TEST(Api, ResolvePrecOnCudaRule) {
    fattn_ctx cuda_ctx;
    cuda_ctx.backend = FATTN_BACKEND_CUDA;
    cuda_ctx.sm_major = 9;
    fattn_attn_params p = fattn_attn_params_default();
    fattn_tensor q = fattn_tensor_contiguous(nullptr, FATTN_F32, 1, 1, 1, 8);
    EXPECT_EQ(fattn_resolve_prec(&cuda_ctx, &p, &q), FATTN_PREC_TF32);
    cuda_ctx.sm_major = 7;
    EXPECT_EQ(fattn_resolve_prec(&cuda_ctx, &p, &q), FATTN_PREC_F32);
    q.dtype = FATTN_F16;
    EXPECT_EQ(fattn_resolve_prec(&cuda_ctx, &p, &q), FATTN_PREC_NATIVE);
}

TEST(Api, WorkspaceTooSmall) {
    fattn::Context ctx = fattn::Context::cpu(1);
    const int64_t B = 1, S = 64, H = 2, D = 32;
    std::vector<float> q(size_t(B * S * H * D), 0.1f), o(q.size()), lse(size_t(B * H * S));
    auto tq = fattn::Tensor::contiguous(q.data(), FATTN_F32, B, S, H, D);
    auto to = fattn::Tensor::contiguous(o.data(), FATTN_F32, B, S, H, D);
    auto tl = fattn::Tensor::contiguous(lse.data(), FATTN_F32, B, H, S, 1);
    fattn::AttnParams p;
    size_t need = 0;
    ASSERT_EQ(ctx.workspace_size(p, tq, tq, tq, FATTN_DIR_FWD, &need), FATTN_OK);
    ASSERT_GT(need, 0u) << "the CPU forward reserves alignment slack at least";
    std::vector<char> ws(need - 1);
    try {
        ctx.attn_fwd(p, tq, tq, tq, to, tl, nullptr, ws.data(), ws.size());
        FAIL() << "expected WORKSPACE_TOO_SMALL";
    } catch (const fattn::Error &e) {
        EXPECT_EQ(e.status(), FATTN_ERR_WORKSPACE_TOO_SMALL);
        EXPECT_NE(e.message().find("workspace"), std::string::npos);
    }
}

// ------------------------------------------------------------------------- C++ wrapper

TEST(Hpp, ContextRaiiAndErrors) {
    fattn::Context ctx = fattn::Context::cpu(2);
    EXPECT_TRUE(ctx.valid());
    EXPECT_EQ(ctx.backend(), FATTN_BACKEND_CPU);
    EXPECT_EQ(ctx.nthreads(), 2);
    fattn::Context moved = std::move(ctx);
    EXPECT_FALSE(ctx.valid());
    EXPECT_TRUE(moved.valid());
    try {
        moved.set_stream(nullptr);
        FAIL() << "expected fattn::Error";
    } catch (const fattn::Error &e) {
        EXPECT_EQ(e.status(), FATTN_ERR_BAD_VALUE);
        EXPECT_NE(std::string(e.what()).find("stream"), std::string::npos);
    }
}

TEST(Hpp, SupportsNeverThrowsAndErrorsCarryMessages) {
    fattn::Context ctx = fattn::Context::cpu(1);
    std::vector<float> buf(2 * 3 * 4 * 8, 0.0f);
    auto q = fattn::Tensor::contiguous(buf.data(), FATTN_F32, 2, 3, 4, 8);
    auto k = fattn::Tensor::contiguous(buf.data(), FATTN_F32, 2, 3, 3, 8);  // 4 % 3 != 0
    fattn::AttnParams p;
    std::string why;
    EXPECT_EQ(ctx.supports(p, q, k, k, &why), FATTN_ERR_GQA_HEADS);
    EXPECT_NE(why.find("k's 3 heads"), std::string::npos) << why;
    EXPECT_EQ(ctx.supports(p, q, q, q, &why), FATTN_OK);
    EXPECT_TRUE(why.empty());
    fattn_attn_memory_info m;
    EXPECT_THROW(ctx.memory(p, q, k, k, &m), fattn::Error);
    EXPECT_EQ(ctx.memory(p, q, q, q, &m), FATTN_OK);
    EXPECT_GT(m.bwd_peak_bytes, 0u);
    EXPECT_EQ(ctx.resolve_prec(p, q), FATTN_PREC_F32);
    EXPECT_THROW(fattn::Context::cuda(12345), fattn::Error);
}

// ------------------------------------------------------------------------- through the kernels

struct Rng {
    std::mt19937 g{1234};
    std::uniform_real_distribution<float> u{-1.0f, 1.0f};
    void fill(std::vector<float> &v) {
        for (float &x : v) x = u(g);
    }
};

// q, k, v, dq, dk, dv as interleaved views of fused [B, S, 3, H, D] buffers must give bitwise the
// same o, lse and grads as separate contiguous buffers: the API passes views, never copies.
TEST(Hpp, FusedQkvViewsMatchSeparateBuffers) {
    const int64_t B = 2, S = 19, H = 3, D = 16;
    fattn::Context ctx = fattn::Context::cpu(2);
    fattn::AttnParams p;
    p.causal = FATTN_CAUSAL_BOTTOM_RIGHT;
    Rng rng;
    std::vector<float> qkv(size_t(B * S * 3 * H * D)), dout(size_t(B * S * H * D));
    rng.fill(qkv);
    rng.fill(dout);
    const int64_t sb = S * 3 * H * D, ss = 3 * H * D;
    auto fused = [&](std::vector<float> &buf, int which) {
        return fattn::Tensor::strided(buf.data() + which * H * D, FATTN_F32, B, S, H, D, sb, ss, D);
    };
    // Separate copies of q, k, v.
    std::vector<float> sep[3];
    for (int w = 0; w < 3; ++w) {
        sep[w].resize(size_t(B * S * H * D));
        for (int64_t b = 0; b < B; ++b)
            for (int64_t s = 0; s < S; ++s)
                std::memcpy(&sep[w][size_t(((b * S) + s) * H * D)], &qkv[size_t(b * sb + s * ss + w * H * D)],
                            sizeof(float) * size_t(H * D));
    }
    auto cont = [&](std::vector<float> &buf) {
        return fattn::Tensor::contiguous(buf.data(), FATTN_F32, B, S, H, D);
    };
    std::vector<float> o1(dout.size()), o2(dout.size()), l1(size_t(B * H * S)), l2(l1.size());
    auto to1 = cont(o1), to2 = cont(o2), tdo = cont(dout);
    auto tl1 = fattn::Tensor::contiguous(l1.data(), FATTN_F32, B, H, S, 1);
    auto tl2 = fattn::Tensor::contiguous(l2.data(), FATTN_F32, B, H, S, 1);
    ctx.attn_fwd(p, fused(qkv, 0), fused(qkv, 1), fused(qkv, 2), to1, tl1);
    ctx.attn_fwd(p, cont(sep[0]), cont(sep[1]), cont(sep[2]), to2, tl2);
    EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(float)));

    std::vector<float> dqkv(qkv.size(), NAN), g[3];
    for (auto &x : g) x.assign(dout.size(), NAN);
    ctx.attn_bwd(p, fused(qkv, 0), fused(qkv, 1), fused(qkv, 2), to1, tl1, nullptr, tdo,
                 fused(dqkv, 0), fused(dqkv, 1), fused(dqkv, 2));
    ctx.attn_bwd(p, cont(sep[0]), cont(sep[1]), cont(sep[2]), to2, tl2, nullptr, tdo, cont(g[0]),
                 cont(g[1]), cont(g[2]));
    double norm = 0;
    for (int w = 0; w < 3; ++w)
        for (int64_t b = 0; b < B; ++b)
            for (int64_t s = 0; s < S; ++s)
                for (int64_t i = 0; i < H * D; ++i) {
                    float a = dqkv[size_t(b * sb + s * ss + w * H * D + i)];
                    float c = g[w][size_t((b * S + s) * H * D + i)];
                    ASSERT_EQ(std::memcmp(&a, &c, sizeof a), 0) << "grad " << w << " b" << b << " s" << s;
                    norm += double(c) * c;
                }
    EXPECT_GT(norm, 0.0);  // not a 0 == 0 comparison
}

// With workspace == NULL the context's allocator provides it, and every allocation is freed.
TEST(Hpp, ContextAllocatorProvidesWorkspace) {
    const int64_t B = 1, S = 33, H = 2, D = 32;
    fattn::Context ctx = fattn::Context::cpu(1);
    Counter c;
    ctx.set_allocator(count_alloc, count_free, &c);
    fattn::AttnParams p;
    Rng rng;
    std::vector<float> q(size_t(B * S * H * D)), o(q.size()), lse(size_t(B * H * S)), dq(q.size());
    rng.fill(q);
    auto t = fattn::Tensor::contiguous(q.data(), FATTN_F32, B, S, H, D);
    auto to = fattn::Tensor::contiguous(o.data(), FATTN_F32, B, S, H, D);
    auto tl = fattn::Tensor::contiguous(lse.data(), FATTN_F32, B, H, S, 1);
    std::vector<float> dk(q.size()), dv(q.size());
    auto tdq = fattn::Tensor::contiguous(dq.data(), FATTN_F32, B, S, H, D);
    auto tdk = fattn::Tensor::contiguous(dk.data(), FATTN_F32, B, S, H, D);
    auto tdv = fattn::Tensor::contiguous(dv.data(), FATTN_F32, B, S, H, D);
    size_t wf = 0, wb = 0;
    ctx.workspace_size(p, t, t, t, FATTN_DIR_FWD, &wf);
    ctx.workspace_size(p, t, t, t, FATTN_DIR_BWD, &wb);
    ctx.attn_fwd(p, t, t, t, to, tl);
    ctx.attn_bwd(p, t, t, t, to, tl, nullptr, to, tdq, tdk, tdv);
    EXPECT_EQ(c.allocs, int(wf > 0) + int(wb > 0));
    EXPECT_EQ(c.frees, c.allocs);
    EXPECT_EQ(c.bytes, wf + wb);
    for (float x : lse) EXPECT_TRUE(std::isfinite(x));
}

// A caller-provided workspace of exactly the queried size gives the same bits as one the context
// allocates (and the context allocator is then not called at all).
TEST(Hpp, CallerWorkspaceMatchesContextWorkspace) {
    const int64_t B = 2, S = 45, Hq = 4, Hkv = 2, D = 24;
    fattn::Context ctx = fattn::Context::cpu(2);
    Counter c;
    ctx.set_allocator(count_alloc, count_free, &c);
    fattn::AttnParams p;
    p.window_left = 7;
    p.window_right = 3;
    Rng rng;
    std::vector<float> q(size_t(B * S * Hq * D)), k(size_t(B * S * Hkv * D)), v(k.size()), dout(q.size());
    rng.fill(q);
    rng.fill(k);
    rng.fill(v);
    rng.fill(dout);
    auto T = [](std::vector<float> &x, int64_t h) {
        return fattn::Tensor::contiguous(x.data(), FATTN_F32, B, S, h, D);
    };
    auto tq = T(q, Hq), tk = T(k, Hkv), tv = T(v, Hkv), tdo = T(dout, Hq);
    size_t wf = 0, wb = 0;
    ctx.workspace_size(p, tq, tk, tv, FATTN_DIR_FWD, &wf);
    ctx.workspace_size(p, tq, tk, tv, FATTN_DIR_BWD, &wb);
    std::vector<char> wsf(wf), wsb(wb);
    std::vector<float> o[2], lse[2], dq[2], dk[2], dv[2];
    for (int run = 0; run < 2; ++run) {
        o[run].assign(q.size(), NAN);
        lse[run].assign(size_t(B * Hq * S), NAN);
        dq[run].assign(q.size(), NAN);
        dk[run].assign(k.size(), NAN);
        dv[run].assign(k.size(), NAN);
        auto to = T(o[run], Hq);
        auto tl = fattn::Tensor::contiguous(lse[run].data(), FATTN_F32, B, Hq, S, 1);
        auto tdq = T(dq[run], Hq), tdk = T(dk[run], Hkv), tdv = T(dv[run], Hkv);
        if (run == 0) {
            ctx.attn_fwd(p, tq, tk, tv, to, tl, nullptr, wsf.data(), wsf.size());
            ctx.attn_bwd(p, tq, tk, tv, to, tl, nullptr, tdo, tdq, tdk, tdv, wsb.data(), wsb.size());
            EXPECT_EQ(c.allocs, 0);  // the caller's workspace was used
        } else {
            ctx.attn_fwd(p, tq, tk, tv, to, tl);
            ctx.attn_bwd(p, tq, tk, tv, to, tl, nullptr, tdo, tdq, tdk, tdv);
        }
    }
    auto same = [](const std::vector<float> &a, const std::vector<float> &b) {
        return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    EXPECT_TRUE(same(o[0], o[1]));
    EXPECT_TRUE(same(lse[0], lse[1]));
    EXPECT_TRUE(same(dq[0], dq[1]));
    EXPECT_TRUE(same(dk[0], dk[1]));
    EXPECT_TRUE(same(dv[0], dv[1]));
    for (float x : dk[0]) ASSERT_TRUE(std::isfinite(x));
}

}  // namespace

namespace {

// EXACT keeps [B, Hq, Sq, Skv] f32 probabilities: a shape whose byte count cannot be represented
// must be refused by supports (it used to wrap to a saved size of 0 bytes).
TEST(Api, ExactProbabilityBytesOverflowIsRefused) {
    fattn_ctx_t *ctx = nullptr;
    ASSERT_EQ(fattn_ctx_init_cpu(1, &ctx), FATTN_OK);
    const int64_t S = int64_t(1) << 31;
    fattn_tensor q = fattn_tensor_contiguous(nullptr, FATTN_F32, 1, S, 1, 16);
    fattn_tensor k = fattn_tensor_contiguous(nullptr, FATTN_F32, 1, S, 1, 16);
    fattn_attn_params p = fattn_attn_params_default();
    char why[256] = {0};
    EXPECT_EQ(fattn_attn_supports(ctx, &p, &q, &k, &k, why, sizeof why), FATTN_OK) << why;
    p.algo = FATTN_ALGO_EXACT;
    EXPECT_EQ(fattn_attn_supports(ctx, &p, &q, &k, &k, why, sizeof why), FATTN_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(why).find("use FUSED"), std::string::npos) << why;
    size_t saved = 1;
    EXPECT_NE(fattn_attn_saved_size(ctx, &p, &q, &k, &k, &saved), FATTN_OK);
    fattn_ctx_free(ctx);
}

// A window wider than Sq + Skv is the same mask as an unbounded one, and must not overflow the
// diagonal arithmetic (INT64_MAX used to overflow diag - left).
TEST(Api, HugeWindowEqualsUnbounded) {
    fattn_ctx_t *ctx = nullptr;
    ASSERT_EQ(fattn_ctx_init_cpu(2, &ctx), FATTN_OK);
    const int64_t B = 1, Sq = 19, Skv = 7, H = 2, D = 16;
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    auto fill = [&](size_t n) {
        std::vector<float> x(n);
        for (auto &e : x) e = nd(rng);
        return x;
    };
    std::vector<float> bq = fill(B * Sq * H * D), bk = fill(B * Skv * H * D), bv = fill(B * Skv * H * D);
    fattn_tensor q = fattn_tensor_contiguous(bq.data(), FATTN_F32, B, Sq, H, D);
    fattn_tensor k = fattn_tensor_contiguous(bk.data(), FATTN_F32, B, Skv, H, D);
    fattn_tensor v = fattn_tensor_contiguous(bv.data(), FATTN_F32, B, Skv, H, D);
    auto run = [&](int64_t left, int64_t right, std::vector<float> &o, std::vector<float> &lse) {
        o.assign(size_t(B * Sq * H * D), NAN);
        lse.assign(size_t(B * H * Sq), NAN);
        fattn_tensor to = fattn_tensor_contiguous(o.data(), FATTN_F32, B, Sq, H, D);
        fattn_tensor tl = fattn_tensor_contiguous(lse.data(), FATTN_F32, B, H, Sq, 1);
        fattn_attn_params p = fattn_attn_params_default();
        p.window_left = left;
        p.window_right = right;
        p.window_align = FATTN_ALIGN_BOTTOM_RIGHT;
        return fattn_attn_fwd(ctx, &p, &q, &k, &v, &to, &tl, nullptr, nullptr, 0);
    };
    std::vector<float> o1, l1, o2, l2;
    ASSERT_EQ(run(-1, -1, o1, l1), FATTN_OK) << fattn_ctx_last_error(ctx);
    ASSERT_EQ(run(INT64_MAX, INT64_MAX, o2, l2), FATTN_OK) << fattn_ctx_last_error(ctx);
    EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(float)));
    fattn_ctx_free(ctx);
}

}  // namespace
