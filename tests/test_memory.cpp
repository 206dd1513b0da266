// test_memory.cpp — the memory model (fattn_attn_memory) and the "longest S that fits" search
// (fattn_attn_max_seqlen) on a CPU context: terms add up from the views, peaks are monotone in S,
// FUSED keeps O(S) bytes while EXACT keeps O(S²), and max_seqlen is the exact boundary of the model.
#include <gtest/gtest.h>

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "fattn/fattn.h"
#include "heap_probe.h"

#if FATTN_HEAP_HOOK
// ---- heap accounting for the measured-peak test: a pass-through global operator new/delete that
// tracks live bytes (malloc_usable_size, so frees need no header) and their high-water mark.
namespace heap {
std::atomic<int64_t> live{0}, high{0};
void note(void *p) {
    if (!p) return;
    int64_t now = live += int64_t(malloc_usable_size(p));
    int64_t h = high.load();
    while (now > h && !high.compare_exchange_weak(h, now)) {
    }
}
void drop(void *p) {
    if (p) live -= int64_t(malloc_usable_size(p));
}
void *get(size_t n) {
    void *p = std::malloc(n ? n : 1);
    if (!p) throw std::bad_alloc();
    note(p);
    return p;
}
void *get_aligned(size_t n, std::align_val_t a) {
    size_t al = size_t(a), r = (n + al - 1) / al * al;
    void *p = std::aligned_alloc(al, r ? r : al);
    if (!p) throw std::bad_alloc();
    note(p);
    return p;
}
void put(void *p) {
    drop(p);
    std::free(p);
}
}  // namespace heap

void *operator new(size_t n) { return heap::get(n); }
void *operator new[](size_t n) { return heap::get(n); }
void *operator new(size_t n, std::align_val_t a) { return heap::get_aligned(n, a); }
void *operator new[](size_t n, std::align_val_t a) { return heap::get_aligned(n, a); }
void operator delete(void *p) noexcept { heap::put(p); }
void operator delete[](void *p) noexcept { heap::put(p); }
void operator delete(void *p, size_t) noexcept { heap::put(p); }
void operator delete[](void *p, size_t) noexcept { heap::put(p); }
void operator delete(void *p, std::align_val_t) noexcept { heap::put(p); }
void operator delete[](void *p, std::align_val_t) noexcept { heap::put(p); }
void operator delete(void *p, size_t, std::align_val_t) noexcept { heap::put(p); }
void operator delete[](void *p, size_t, std::align_val_t) noexcept { heap::put(p); }
#endif

namespace {

struct Geo {
    int64_t B = 2, Hq = 8, Hkv = 2, D = 64, Dv = 64;
    fattn_dtype dt = FATTN_BF16;
};

// The default params with algorithm a.
fattn_attn_params params_with(fattn_algo a) {
    fattn_attn_params p = fattn_attn_params_default();
    p.algo = a;
    return p;
}

struct Mem {
    fattn_ctx_t *ctx = nullptr;
    Mem() { fattn_ctx_init_cpu(1, &ctx); }
    ~Mem() { fattn_ctx_free(ctx); }
    fattn_attn_memory_info at(const fattn_attn_params &p, const Geo &g, int64_t S) {
        fattn_tensor q = fattn_tensor_contiguous(nullptr, g.dt, g.B, S, g.Hq, g.D);
        fattn_tensor k = fattn_tensor_contiguous(nullptr, g.dt, g.B, S, g.Hkv, g.D);
        fattn_tensor v = fattn_tensor_contiguous(nullptr, g.dt, g.B, S, g.Hkv, g.Dv);
        fattn_attn_memory_info m{};
        fattn_status s = fattn_attn_memory(ctx, &p, &q, &k, &v, &m);
        EXPECT_EQ(s, FATTN_OK) << fattn_ctx_last_error(ctx);
        return m;
    }
};

TEST(Memory, TermsFromViews) {
    Mem M;
    Geo g;
    fattn_attn_params p = fattn_attn_params_default();
    const int64_t S = 100;
    fattn_attn_memory_info m = M.at(p, g, S);
    const uint64_t es = 2;
    const uint64_t q = uint64_t(g.B * S * g.Hq * g.D) * es, kv = uint64_t(g.B * S * g.Hkv * g.D) * es;
    const uint64_t o = uint64_t(g.B * S * g.Hq * g.Dv) * es, lse = uint64_t(g.B * g.Hq * S) * 4;
    EXPECT_EQ(m.inputs_bytes, q + 2 * kv);
    size_t saved_buf = 0;
    {
        fattn_tensor tq = fattn_tensor_contiguous(nullptr, g.dt, g.B, S, g.Hq, g.D);
        fattn_tensor tk = fattn_tensor_contiguous(nullptr, g.dt, g.B, S, g.Hkv, g.D);
        ASSERT_EQ(fattn_attn_saved_size(M.ctx, &p, &tq, &tk, &tk, &saved_buf), FATTN_OK);
    }
    EXPECT_EQ(m.saved_bytes, o + lse + saved_buf);
    EXPECT_EQ(m.grads_bytes, o + q + 2 * kv);
    EXPECT_EQ(m.fwd_peak_bytes, m.inputs_bytes + m.saved_bytes + m.fwd_workspace_bytes);
    EXPECT_EQ(m.bwd_peak_bytes,
              m.inputs_bytes + m.saved_bytes + m.grads_bytes + m.bwd_workspace_bytes);
}

TEST(Memory, FusedQkvAndBroadcastBiasCountedOnce) {
    Mem M;
    const int64_t B = 2, S = 10, H = 4, D = 16;
    fattn_attn_params p = fattn_attn_params_default();
    std::vector<float> bias(static_cast<size_t>(S));  // one row of key biases, broadcast over B, H and rows
    p.bias = fattn_tensor_4d(bias.data(), FATTN_F32, B, H, S, S, 0, 0, 0, 1);
    const int64_t sb = S * 3 * H * D, ss = 3 * H * D;
    fattn_tensor q = fattn_tensor_4d(nullptr, FATTN_F32, B, S, H, D, sb, ss, D, 1);
    fattn_attn_memory_info m{};
    ASSERT_EQ(fattn_attn_memory(M.ctx, &p, &q, &q, &q, &m), FATTN_OK) << fattn_ctx_last_error(M.ctx);
    EXPECT_EQ(m.inputs_bytes, uint64_t(3 * B * S * H * D * 4 + S * 4));
}

TEST(Memory, MonotoneInS) {
    Mem M;
    Geo g;
    for (fattn_algo algo : {FATTN_ALGO_FUSED, FATTN_ALGO_EXACT}) {
        const fattn_attn_params p = params_with(algo);
        fattn_attn_memory_info prev = M.at(p, g, 1);
        for (int64_t S = 2; S <= 4096; S = S * 3 / 2 + 1) {
            fattn_attn_memory_info m = M.at(p, g, S);
            EXPECT_GT(m.saved_bytes, prev.saved_bytes) << fattn_algo_name(algo) << " S=" << S;
            EXPECT_GE(m.fwd_peak_bytes, prev.fwd_peak_bytes) << fattn_algo_name(algo) << " S=" << S;
            EXPECT_GT(m.bwd_peak_bytes, prev.bwd_peak_bytes) << fattn_algo_name(algo) << " S=" << S;
            prev = m;
        }
    }
}

TEST(Memory, FusedSavedLinearExactQuadratic) {
    Mem M;
    Geo g;
    fattn_attn_params fused = fattn_attn_params_default(), exact = fused;
    exact.algo = FATTN_ALGO_EXACT;
    for (int64_t S : {256, 1024, 4096}) {
        fattn_attn_memory_info f1 = M.at(fused, g, S), f2 = M.at(fused, g, 2 * S);
        EXPECT_EQ(f2.saved_bytes, 2 * f1.saved_bytes) << "FUSED saved bytes must be linear, S=" << S;
        fattn_attn_memory_info e1 = M.at(exact, g, S);
        EXPECT_GT(e1.saved_bytes, f1.saved_bytes) << "S=" << S;
        EXPECT_GT(e1.bwd_peak_bytes, f1.bwd_peak_bytes) << "S=" << S;
        // EXACT keeps at least the B·Hq·S² probabilities on top of what FUSED keeps.
        EXPECT_GE(e1.saved_bytes - f1.saved_bytes, uint64_t(g.B * g.Hq * S * S) * 2) << "S=" << S;
    }
}

TEST(Memory, MaxSeqlenIsTheModelsBoundary) {
    Mem M;
    Geo g;
    for (fattn_algo algo : {FATTN_ALGO_FUSED, FATTN_ALGO_EXACT}) {
        const fattn_attn_params p = params_with(algo);
        for (uint64_t budget : {uint64_t(1) << 20, uint64_t(1) << 30, uint64_t(24) << 30}) {
            int64_t s = -1;
            ASSERT_EQ(fattn_attn_max_seqlen(M.ctx, &p, g.dt, g.B, g.Hq, g.Hkv, g.D, g.Dv, budget, &s),
                      FATTN_OK)
                << fattn_ctx_last_error(M.ctx);
            ASSERT_GT(s, 0) << fattn_algo_name(algo) << " budget " << budget;
            EXPECT_LE(M.at(p, g, s).bwd_peak_bytes, budget);
            EXPECT_GT(M.at(p, g, s + 1).bwd_peak_bytes, budget);
        }
        int64_t s = -1;
        ASSERT_EQ(fattn_attn_max_seqlen(M.ctx, &p, g.dt, g.B, g.Hq, g.Hkv, g.D, g.Dv, 100, &s), FATTN_OK);
        EXPECT_EQ(s, 0);  // not even S = 1 fits in 100 bytes
    }
    // FUSED affords a longer S than EXACT in the same budget.
    fattn_attn_params f = fattn_attn_params_default(), e = f;
    e.algo = FATTN_ALGO_EXACT;
    int64_t sf = 0, se = 0;
    ASSERT_EQ(fattn_attn_max_seqlen(M.ctx, &f, g.dt, g.B, g.Hq, g.Hkv, g.D, g.Dv, uint64_t(1) << 30, &sf), FATTN_OK);
    ASSERT_EQ(fattn_attn_max_seqlen(M.ctx, &e, g.dt, g.B, g.Hq, g.Hkv, g.D, g.Dv, uint64_t(1) << 30, &se), FATTN_OK);
    EXPECT_GT(sf, 2 * se);
}

// The model against a measurement: the caller's buffers (allocated dense, as the model counts
// them) plus the high-water of everything the library allocates during the call (the context
// allocator's workspace, and any heap it takes internally). DESIGN §8: never under-predict,
// over-predict by at most 15%.
#if FATTN_HEAP_HOOK
TEST(Memory, ModelCoversMeasuredPeak) {
    for (fattn_algo algo : {FATTN_ALGO_FUSED, FATTN_ALGO_EXACT}) {
        const int64_t B = 1, S = 512, Hq = 4, Hkv = 2, D = 64;
        fattn_ctx_t *ctx = nullptr;
        ASSERT_EQ(fattn_ctx_init_cpu(2, &ctx), FATTN_OK);
        CountingAlloc ca;
        ASSERT_EQ(fattn_ctx_set_allocator(ctx, CountingAlloc::alloc, CountingAlloc::free_fn, &ca), FATTN_OK);
        fattn_attn_params p = params_with(algo);
        p.causal = FATTN_CAUSAL_TOP_LEFT;
        std::mt19937 g(7);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        auto buf = [&](int64_t n) {
            std::vector<float> v(static_cast<size_t>(n));
            for (float &x : v) x = u(g);
            return v;
        };
        std::vector<float> q = buf(B * S * Hq * D), k = buf(B * S * Hkv * D), v = buf(B * S * Hkv * D);
        std::vector<float> o = buf(B * S * Hq * D), lse = buf(B * Hq * S), dout = buf(B * S * Hq * D);
        std::vector<float> dq = buf(B * S * Hq * D), dk = buf(B * S * Hkv * D), dv = buf(B * S * Hkv * D);
        auto T = [](std::vector<float> &x, int64_t a, int64_t b, int64_t c, int64_t d) {
            return fattn_tensor_contiguous(x.data(), FATTN_F32, a, b, c, d);
        };
        fattn_tensor tq = T(q, B, S, Hq, D), tk = T(k, B, S, Hkv, D), tv = T(v, B, S, Hkv, D);
        fattn_tensor to = T(o, B, S, Hq, D), tl = T(lse, B, Hq, S, 1), tdo = T(dout, B, S, Hq, D);
        fattn_tensor tdq = T(dq, B, S, Hq, D), tdk = T(dk, B, S, Hkv, D), tdv = T(dv, B, S, Hkv, D);
        size_t saved_bytes = 0;
        ASSERT_EQ(fattn_attn_saved_size(ctx, &p, &tq, &tk, &tv, &saved_bytes), FATTN_OK);
        std::vector<char> saved(saved_bytes);
        fattn_attn_memory_info m{};
        ASSERT_EQ(fattn_attn_memory(ctx, &p, &tq, &tk, &tv, &m), FATTN_OK) << fattn_ctx_last_error(ctx);

        const int64_t caller_fwd = int64_t(sizeof(float)) * int64_t(q.size() + k.size() + v.size() + o.size() + lse.size()) + int64_t(saved_bytes);
        const int64_t caller_bwd = caller_fwd + int64_t(sizeof(float)) * int64_t(dout.size() + dq.size() + dk.size() + dv.size());
        heap::high = heap::live.load();
        const int64_t base = heap::live;
        ASSERT_EQ(fattn_attn_fwd(ctx, &p, &tq, &tk, &tv, &to, &tl, saved.data(), nullptr, 0), FATTN_OK)
            << fattn_ctx_last_error(ctx);
        const int64_t fwd_lib = ca.high + (heap::high - base);
        ca.high = 0;
        heap::high = heap::live.load();
        ASSERT_EQ(fattn_attn_bwd(ctx, &p, &tq, &tk, &tv, &to, &tl, saved.data(), &tdo, &tdq, &tdk, &tdv,
                                 nullptr, 0),
                  FATTN_OK)
            << fattn_ctx_last_error(ctx);
        const int64_t bwd_lib = ca.high + (heap::high - base);
        const double fwd_meas = double(caller_fwd + fwd_lib), bwd_meas = double(caller_bwd + bwd_lib);
        std::printf("[memory] %s S=%lld: fwd model %llu measured %.0f (x%.3f), bwd model %llu measured %.0f (x%.3f)\n",
                    fattn_algo_name(algo), (long long)S, (unsigned long long)m.fwd_peak_bytes, fwd_meas,
                    double(m.fwd_peak_bytes) / fwd_meas, (unsigned long long)m.bwd_peak_bytes, bwd_meas,
                    double(m.bwd_peak_bytes) / bwd_meas);
        EXPECT_GE(double(m.fwd_peak_bytes), fwd_meas) << fattn_algo_name(algo);
        EXPECT_GE(double(m.bwd_peak_bytes), bwd_meas) << fattn_algo_name(algo);
        EXPECT_LE(double(m.fwd_peak_bytes), 1.15 * fwd_meas) << fattn_algo_name(algo);
        EXPECT_LE(double(m.bwd_peak_bytes), 1.15 * bwd_meas) << fattn_algo_name(algo);
        fattn_ctx_free(ctx);
    }
}
#endif  // FATTN_HEAP_HOOK

TEST(Memory, MaxSeqlenErrors) {
    Mem M;
    fattn_attn_params p = fattn_attn_params_default();
    int64_t s = 0;
    EXPECT_EQ(fattn_attn_max_seqlen(M.ctx, &p, FATTN_F32, 1, 4, 3, 64, 64, 1 << 30, &s),
              FATTN_ERR_GQA_HEADS);
    EXPECT_EQ(fattn_attn_max_seqlen(M.ctx, &p, FATTN_F32, 0, 4, 4, 64, 64, 1 << 30, &s),
              FATTN_ERR_BAD_VALUE);
    EXPECT_EQ(fattn_attn_max_seqlen(M.ctx, &p, FATTN_F32, 1, 4, 4, 64, 64, 1 << 30, nullptr),
              FATTN_ERR_NULL_POINTER);
    fattn_attn_memory_info m;
    fattn_tensor q = fattn_tensor_contiguous(nullptr, FATTN_F32, 1, 8, 4, 0);
    EXPECT_EQ(fattn_attn_memory(M.ctx, &p, &q, &q, &q, &m), FATTN_ERR_BAD_HEAD_DIM);
}

}  // namespace
