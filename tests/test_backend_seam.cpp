// test_backend_seam.cpp — what a context whose backend is not in the library answers (a CUDA
// context in a build without CUDA, hand-built since fattn_ctx_init_cuda refuses to make one): every
// entry point says BACKEND_UNAVAILABLE with one message and nothing runs on another backend. The
// bias gradient is refused as on any CUDA context, before the backend is looked up.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/context.h"
#include "fattn/fattn.h"

#ifndef FATTN_WITH_CUDA

namespace {

constexpr const char *kMissing = "ctx: a CUDA context in a build without CUDA";

fattn_ctx forged_cuda_ctx() {
    fattn_ctx c;
    c.backend = FATTN_BACKEND_CUDA;
    c.sm_major = 9;
    c.id = 1u << 30;  // apart from the ids fattn_ctx_init_* hands out in this process
    return c;
}

}  // namespace

TEST(BackendSeam, AttentionOnAMissingBackend) {
    fattn_ctx ctx = forged_cuda_ctx();
    const int64_t S = 16, H = 2, D = 32;
    std::vector<float> buf(size_t(S * H * D), 0.5f), out(buf.size()), lse(size_t(H * S));
    fattn_attn_params p = fattn_attn_params_default();
    fattn_tensor q = fattn_tensor_contiguous(buf.data(), FATTN_F32, 1, S, H, D);
    fattn_tensor o = fattn_tensor_contiguous(out.data(), FATTN_F32, 1, S, H, D);
    fattn_tensor l = fattn_tensor_contiguous(lse.data(), FATTN_F32, 1, H, S, 1);
    char why[256];
    EXPECT_EQ(fattn_attn_supports(&ctx, &p, &q, &q, &q, why, sizeof why), FATTN_ERR_BACKEND_UNAVAILABLE);
    EXPECT_STREQ(why, kMissing);
    size_t bytes = 1;
    EXPECT_EQ(fattn_attn_workspace_size(&ctx, &p, &q, &q, &q, FATTN_DIR_BWD, &bytes), FATTN_ERR_BACKEND_UNAVAILABLE);
    EXPECT_EQ(bytes, 0u);
    EXPECT_EQ(fattn_attn_fwd(&ctx, &p, &q, &q, &q, &o, &l, nullptr, nullptr, 0), FATTN_ERR_BACKEND_UNAVAILABLE);
    EXPECT_STREQ(fattn_ctx_last_error(&ctx), kMissing);
    EXPECT_EQ(out[0], 0.f) << "nothing ran on the CPU";

    std::vector<float> bias(size_t(H * S * S), 0.f);
    p.bias = fattn_tensor_contiguous(bias.data(), FATTN_F32, 1, H, S, S);
    // with the bias gradient too: the missing backend is the answer (its table decides dbias)
    EXPECT_EQ(fattn_attn_supports_ex(&ctx, &p, &q, &q, &q, FATTN_ATTN_WANT_DBIAS, why, sizeof why),
              FATTN_ERR_BACKEND_UNAVAILABLE);
    EXPECT_STREQ(why, kMissing);
}

TEST(BackendSeam, MergeOnAMissingBackend) {
    fattn_ctx ctx = forged_cuda_ctx();
    const int64_t S = 4, H = 2, D = 8;
    std::vector<float> o0(size_t(S * H * D), 1.f), l0(size_t(H * S), 0.f), o(o0.size()), l(l0.size());
    fattn_tensor po = fattn_tensor_contiguous(o0.data(), FATTN_F32, 1, S, H, D);
    fattn_tensor pl = fattn_tensor_contiguous(l0.data(), FATTN_F32, 1, H, S, 1);
    fattn_tensor to = fattn_tensor_contiguous(o.data(), FATTN_F32, 1, S, H, D);
    fattn_tensor tl = fattn_tensor_contiguous(l.data(), FATTN_F32, 1, H, S, 1);
    EXPECT_EQ(fattn_attn_merge(&ctx, 1, &po, &pl, &to, &tl), FATTN_ERR_BACKEND_UNAVAILABLE);
    EXPECT_STREQ(fattn_ctx_last_error(&ctx), kMissing);
    EXPECT_EQ(o[0], 0.f) << "nothing ran on the CPU";
}

TEST(BackendSeam, PathOnAMissingBackend) {
    fattn_ctx ctx = forged_cuda_ctx();
    const int64_t T = 16, H = 2, K = 16;
    std::vector<float> x(size_t(T * H * K), 0.f), be(size_t(T * H), 1.f);
    for (size_t i = 0; i < x.size(); i += size_t(K)) x[i] = 1.f;  // unit w
    fattn_path_params p = fattn_path_params_default();
    fattn_tensor t = fattn_tensor_contiguous(x.data(), FATTN_F32, 1, T, H, K);
    fattn_tensor b = fattn_tensor_contiguous(be.data(), FATTN_F32, 1, T, H, 1);
    fattn_tensor g = fattn_tensor_none();
    char why[256];
    EXPECT_EQ(fattn_path_supports(&ctx, &p, &t, &t, &t, &t, &b, &g, why, sizeof why), FATTN_ERR_BACKEND_UNAVAILABLE);
    EXPECT_STREQ(why, kMissing);
}

#endif  // FATTN_WITH_CUDA
