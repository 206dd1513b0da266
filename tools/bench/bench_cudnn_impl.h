// bench_cudnn_impl.h — cuDNN SDPA (fused flash attention of cuDNN 9) as a benchmark arm, built
// through the header-only cudnn-frontend graph API. Included only by bench_cudnn.cpp when
// FATTN_BENCH_CUDNN is defined. Runs the same case on the same inputs, [B, S, H, D] strides (no
// copies), f16/bf16 only (cuDNN SDPA has no f32 path), causal by the same alignment, the band bias
// as a broadcast [1, 1, Sq, Skv] bias. cuDNN's default backward is not deterministic (TARGETS.md);
// we run it as PyTorch's `cudnn` backend does, for the speed reference.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>

#include <cmath>
#include <cudnn_frontend.h>
#include <memory>
#include <unordered_map>

#include "core/dtype.h"

namespace fbench {

bool cudnn_built() { return true; }

namespace {

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kBias, kDO, kDQ, kDK, kDV };

std::vector<int64_t> bshd_dims(int64_t B, int64_t S, int64_t H, int64_t D) { return {B, H, S, D}; }
std::vector<int64_t> bshd_strides(int64_t, int64_t S, int64_t H, int64_t D) {
    return {S * H * D, D, H * D, 1};
}

TensorPtr input(fe::graph::Graph &g, const char *name, int64_t uid, int64_t B, int64_t S, int64_t H,
                int64_t D) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim(bshd_dims(B, S, H, D))
                        .set_stride(bshd_strides(B, S, H, D)));
}

cudnnHandle_t cudnn_handle(std::string *err) {
    static cudnnHandle_t h = nullptr;  // one per process: creation is expensive
    if (!h) {
        cudnnStatus_t s = cudnnCreate(&h);
        if (s != CUDNN_STATUS_SUCCESS) {
            *err = std::string("cudnnCreate: ") + cudnnGetErrorString(s);
            h = nullptr;
        }
    }
    return h;
}

void common_graph(fe::graph::Graph &g, fattn_dtype dt) {
    g.set_io_data_type(dt == FATTN_F16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
}

template <typename Attr>
void set_masks(Attr &a, const Case &c, TensorPtr bias) {
    if (c.causal == FATTN_CAUSAL_TOP_LEFT) a.set_causal_mask(true);
    if (c.causal == FATTN_CAUSAL_BOTTOM_RIGHT) a.set_causal_mask_bottom_right(true);
    if (bias) a.set_bias(bias);
}

TensorPtr bias_tensor(fe::graph::Graph &g, const Case &c) {
    if (c.band < 0) return nullptr;
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name("bias")
                        .set_uid(kBias)
                        .set_dim({1, 1, c.Sq, c.Skv})
                        .set_stride({c.Sq * c.Skv, c.Sq * c.Skv, c.Skv, 1}));
}

}  // namespace

ArmResult run_cudnn_arm(const Case &c, const Options &opt, const HostData &in) {
    ArmResult r;
    r.arm = "cudnn";
    if (c.dtype == FATTN_F32) return r.status = "unsupported: cuDNN SDPA runs f16/bf16 only", r;
    if (c.window >= 0) return r.status = "unsupported: analytic window not wired in this arm", r;
    r.prec = "NATIVE";
    std::string err;
    cudnnHandle_t h = cudnn_handle(&err);
    if (!h) return r.status = "error: " + err, r;
    cudnnSetStream(h, nullptr);
    const float scale = 1.0f / std::sqrt(float(c.D));

    fe::graph::Graph gf, gb;
    common_graph(gf, c.dtype);
    common_graph(gb, c.dtype);
    {
        TensorPtr q = input(gf, "Q", kQ, c.B, c.Sq, c.Hq, c.D);
        TensorPtr k = input(gf, "K", kK, c.B, c.Skv, c.Hkv, c.D);
        TensorPtr v = input(gf, "V", kV, c.B, c.Skv, c.Hkv, c.D);
        auto a = fe::graph::SDPA_attributes().set_name("sdpa_fwd").set_generate_stats(true).set_attn_scale(scale);
        set_masks(a, c, bias_tensor(gf, c));
        auto [o, stats] = gf.sdpa(q, k, v, a);
        o->set_output(true).set_uid(kO).set_dim(bshd_dims(c.B, c.Sq, c.Hq, c.D)).set_stride(bshd_strides(c.B, c.Sq, c.Hq, c.D));
        stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT);
    }
    {
        TensorPtr q = input(gb, "Q", kQ, c.B, c.Sq, c.Hq, c.D);
        TensorPtr k = input(gb, "K", kK, c.B, c.Skv, c.Hkv, c.D);
        TensorPtr v = input(gb, "V", kV, c.B, c.Skv, c.Hkv, c.D);
        TensorPtr o = input(gb, "O", kO, c.B, c.Sq, c.Hq, c.D);
        TensorPtr dO = input(gb, "dO", kDO, c.B, c.Sq, c.Hq, c.D);
        TensorPtr stats = gb.tensor(fe::graph::Tensor_attributes()
                                        .set_name("stats")
                                        .set_uid(kStats)
                                        .set_dim({c.B, c.Hq, c.Sq, 1})
                                        .set_stride({c.Hq * c.Sq, c.Sq, 1, 1})
                                        .set_data_type(fe::DataType_t::FLOAT));
        auto a = fe::graph::SDPA_backward_attributes().set_name("sdpa_bwd").set_attn_scale(scale);
        set_masks(a, c, bias_tensor(gb, c));
        auto [dq, dk, dv] = gb.sdpa_backward(q, k, v, o, dO, stats, a);
        dq->set_output(true).set_uid(kDQ).set_dim(bshd_dims(c.B, c.Sq, c.Hq, c.D)).set_stride(bshd_strides(c.B, c.Sq, c.Hq, c.D));
        dk->set_output(true).set_uid(kDK).set_dim(bshd_dims(c.B, c.Skv, c.Hkv, c.D)).set_stride(bshd_strides(c.B, c.Skv, c.Hkv, c.D));
        dv->set_output(true).set_uid(kDV).set_dim(bshd_dims(c.B, c.Skv, c.Hkv, c.D)).set_stride(bshd_strides(c.B, c.Skv, c.Hkv, c.D));
    }
    for (fe::graph::Graph *g : {&gf, &gb}) {
        auto e = g->build(h, {fe::HeurMode_t::A});
        if (e.is_bad()) return r.status = "unsupported: cuDNN: " + e.get_message(), r;
    }
    int64_t wsf = 0, wsb = 0;
    if (gf.get_workspace_size(wsf).is_bad() || gb.get_workspace_size(wsb).is_bad())
        return r.status = "error: cuDNN workspace size", r;

    const fattn_backend be = FATTN_BACKEND_CUDA;
    const size_t es = 2;
    const int64_t nq = c.B * c.Sq * c.Hq * c.D, nkv = c.B * c.Skv * c.Hkv * c.D;
    size_t free0 = 0, tot = 0;
    dev::mem_info(&free0, &tot);
    std::vector<void *> ptrs;
    auto get = [&](size_t n) {
        void *p = nullptr;
        if (dev::alloc(be, &p, n)) ptrs.push_back(p);
        return p;
    };
    struct Freer {
        std::vector<void *> &v;
        ~Freer() {
            for (void *p : v) dev::free(FATTN_BACKEND_CUDA, p);
        }
    } freer{ptrs};
    void *q = get(nq * es), *k = get(nkv * es), *v = get(nkv * es), *o = get(nq * es), *dO = get(nq * es);
    void *dq = get(nq * es), *dk = get(nkv * es), *dv = get(nkv * es);
    void *stats = get(size_t(c.B * c.Hq * c.Sq) * 4), *ws = get(size_t(std::max(wsf, wsb)));
    void *bias = in.bias.empty() ? nullptr : get(in.bias.size());
    if (!q || !k || !v || !o || !dO || !dq || !dk || !dv || !stats || !ws || (!in.bias.empty() && !bias))
        return r.status = "skipped: out of device memory", r;
    dev::upload(be, q, in.q.data(), in.q.size());
    dev::upload(be, k, in.k.data(), in.k.size());
    dev::upload(be, v, in.v.data(), in.v.size());
    dev::upload(be, dO, in.dout.data(), in.dout.size());
    if (bias) dev::upload(be, bias, in.bias.data(), in.bias.size());

    std::unordered_map<int64_t, void *> pf = {{kQ, q}, {kK, k}, {kV, v}, {kO, o}, {kStats, stats}};
    std::unordered_map<int64_t, void *> pb = {{kQ, q},   {kK, k},   {kV, v},   {kO, o},  {kStats, stats},
                                              {kDO, dO}, {kDQ, dq}, {kDK, dk}, {kDV, dv}};
    if (bias) pf[kBias] = pb[kBias] = bias;
    auto fwd = [&] { return gf.execute(h, pf, ws).is_good(); };
    auto fwdbwd = [&] { return fwd() && gb.execute(h, pb, ws).is_good(); };
    dev::Timer first(FATTN_BACKEND_CPU);
    first.start();
    if (!fwdbwd()) return r.status = "error: cuDNN execute failed", r;
    dev::sync(be);
    const double first_ms = first.stop_ms();
    size_t free1 = 0;
    dev::mem_info(&free1, &tot);
    r.measured_peak = double(free0) - double(free1);
    auto to_f32 = [&](const void *src, int64_t n) {
        std::vector<uint8_t> raw(static_cast<size_t>(n) * es);
        std::vector<float> out(static_cast<size_t>(n));
        dev::download(be, raw.data(), src, raw.size());
        for (int64_t i = 0; i < n; ++i) out[size_t(i)] = fattn::load_f32(raw.data(), c.dtype, i);
        return out;
    };
    r.o = to_f32(o, nq);
    r.dq = to_f32(dq, nq);
    r.dk = to_f32(dk, nkv);
    r.dv = to_f32(dv, nkv);
    r.have_values = true;
    int warm = opt.warmup >= 0 ? opt.warmup : 3;
    int reps = opt.reps > 0 ? opt.reps : 10;
    if (first_ms > opt.slow_ms) {
        warm = std::min(warm, 1);
        reps = std::min(reps, 3);
    }
    r.fwd_ms = dev::time_median(be, warm, reps, fwd);
    r.fwdbwd_ms = dev::time_median(be, warm, reps, fwdbwd);
    if (r.fwd_ms < 0 || r.fwdbwd_ms < 0) r.status = "error: cuDNN execute failed while timing";
    return r;
}

}  // namespace fbench
