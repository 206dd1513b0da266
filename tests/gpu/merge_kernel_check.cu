// merge_kernel_check.cu — the CUDA kernel of fattn_attn_merge (src/cuda/merge.cu) on a GPU,
// against a float64 fold of the same partials: 1, 2, 3 and 17 parts, a quarter of the lse values
// -inf (rows where every part is -inf must give o = 0, lse = -inf), f32 / bf16 / f16 parts and
// outputs, strided part views, Dv past one 256-column pass; and bitwise equal on a second run.
// Standalone (no library build): on the GPU machine, from the repository root,
//   nvcc -std=c++17 -O2 -arch=sm_90a -I src -I include tests/gpu/merge_kernel_check.cu \
//        src/cuda/merge.cu -o /tmp/merge_check && /tmp/merge_check
// Exit 0 and "merge kernel: N cases OK" when every case passes.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/merge_cuda.h"

namespace {

uint16_t to16(float x, fattn_dtype t) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if (t == FATTN_BF16) return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);  // finite inputs only
    // f16 (|x| < 65504, normal range of these inputs), round to nearest even
    const uint32_t s = (u >> 16) & 0x8000u;
    int e = int((u >> 23) & 0xFF) - 127 + 15;
    uint32_t m = u & 0x7FFFFFu;
    if (e <= 0) return uint16_t(s);
    uint32_t r = (uint32_t(e) << 10) | (m >> 13);
    const uint32_t rem = m & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
    return uint16_t(s | r);
}
float from16(uint16_t h, fattn_dtype t) {
    if (t == FATTN_BF16) {
        uint32_t u = uint32_t(h) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
    const uint32_t s = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FF;
    uint32_t u = e == 0 ? s : s | ((e - 15 + 127) << 23) | (m << 13);
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

struct Case {
    int64_t B, S, H, Dv;
    int n;
    fattn_dtype part_dt, out_dt;
    int64_t pad;  // extra elements per token row of each part (a strided view)
};

bool run_case(const Case &c, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    std::uniform_real_distribution<double> u01;
    const int64_t tok = c.H * c.Dv + c.pad, on = c.B * c.S * tok, ln = c.B * c.H * c.S;
    const size_t es = c.part_dt == FATTN_F32 ? 4 : 2, oes = c.out_dt == FATTN_F32 ? 4 : 2;
    std::vector<std::vector<float>> ov(size_t(c.n)), lv(size_t(c.n));
    std::vector<fattn::MergePart> parts(size_t(c.n));
    std::vector<void *> dev;
    for (int i = 0; i < c.n; ++i) {
        auto &o = ov[size_t(i)];
        auto &l = lv[size_t(i)];
        o.resize(size_t(on));
        l.resize(size_t(ln));
        std::vector<uint8_t> raw(size_t(on) * es);
        for (int64_t j = 0; j < on; ++j) {
            float x = nd(rng);
            if (c.part_dt == FATTN_F32) {
                std::memcpy(&raw[size_t(j) * 4], &x, 4);
            } else {
                const uint16_t h = to16(x, c.part_dt);
                std::memcpy(&raw[size_t(j) * 2], &h, 2);
                x = from16(h, c.part_dt);
            }
            o[size_t(j)] = x;
        }
        for (auto &x : l) x = u01(rng) < 0.25 ? -INFINITY : 3.f * nd(rng);
        void *od = nullptr, *ld = nullptr;
        cudaMalloc(&od, raw.size());
        cudaMalloc(&ld, size_t(ln) * 4);
        cudaMemcpy(od, raw.data(), raw.size(), cudaMemcpyHostToDevice);
        cudaMemcpy(ld, l.data(), size_t(ln) * 4, cudaMemcpyHostToDevice);
        dev.push_back(od);
        dev.push_back(ld);
        parts[size_t(i)] = {od, c.S * tok, tok, c.Dv, static_cast<const float *>(ld), c.H * c.S, c.S, int32_t(c.part_dt), 0};
    }
    const int64_t outn = c.B * c.S * c.H * c.Dv;
    void *o_out = nullptr, *l_out = nullptr, *pdev = nullptr;
    cudaMalloc(&o_out, size_t(outn) * oes);
    cudaMalloc(&l_out, size_t(ln) * 4);
    cudaMalloc(&pdev, size_t(c.n) * sizeof(fattn::MergePart));
    fattn::MergeParams p{};
    p.batch = c.B, p.seq = c.S, p.heads = c.H, p.dim_v = c.Dv, p.n_parts = c.n, p.parts = parts.data();
    p.o = o_out, p.o_sb = c.S * c.H * c.Dv, p.o_ss = c.H * c.Dv, p.o_sh = c.Dv, p.o_dtype = c.out_dt;
    p.lse = static_cast<float *>(l_out), p.lse_sb = c.H * c.S, p.lse_sh = c.S, p.stream = nullptr;
    fattn::cuda::DeviceInfo di{};
    cudaGetDevice(&di.device);
    std::vector<uint8_t> o1(size_t(outn) * oes), o2(o1.size());
    std::vector<float> l1(static_cast<size_t>(ln)), l2(static_cast<size_t>(ln));
    bool ok = true;
    for (int rep = 0; rep < 2; ++rep) {
        std::string err;
        if (fattn::cuda::attn_merge(p, di, static_cast<fattn::MergePart *>(pdev), &err) != FATTN_OK) {
            std::printf("  launch failed: %s\n", err.c_str());
            return false;
        }
        if (cudaDeviceSynchronize() != cudaSuccess) {
            std::printf("  kernel failed: %s\n", cudaGetErrorString(cudaGetLastError()));
            return false;
        }
        cudaMemcpy(rep ? o2.data() : o1.data(), o_out, o1.size(), cudaMemcpyDeviceToHost);
        cudaMemcpy(rep ? l2.data() : l1.data(), l_out, size_t(ln) * 4, cudaMemcpyDeviceToHost);
    }
    if (o1 != o2 || std::memcmp(l1.data(), l2.data(), l1.size() * 4) != 0) {
        std::printf("  two runs differ in their bits\n");
        ok = false;
    }
    double omax = 0, oerr = 0, lerr = 0;
    for (int64_t b = 0; b < c.B; ++b)
        for (int64_t t = 0; t < c.S; ++t)
            for (int64_t h = 0; h < c.H; ++h) {
                const int64_t li = (b * c.H + h) * c.S + t;
                double m = -INFINITY;
                for (int i = 0; i < c.n; ++i) m = std::fmax(m, double(lv[size_t(i)][size_t(li)]));
                double den = 0;
                if (m != -INFINITY)
                    for (int i = 0; i < c.n; ++i) den += std::exp(double(lv[size_t(i)][size_t(li)]) - m);
                const double L = m == -INFINITY ? -INFINITY : m + std::log(den);
                if (L == -INFINITY ? l1[size_t(li)] != -INFINITY : std::fabs(l1[size_t(li)] - L) > 2e-6 * std::fmax(1.0, std::fabs(L)))
                    ok = false, lerr = std::fmax(lerr, std::fabs(l1[size_t(li)] - L));
                for (int64_t d = 0; d < c.Dv; ++d) {
                    double r = 0;
                    for (int i = 0; i < c.n && m != -INFINITY; ++i) {
                        const double l = lv[size_t(i)][size_t(li)];
                        if (l != -INFINITY) r += std::exp(l - m) / den * ov[size_t(i)][size_t(b * c.S * tok + t * tok + h * c.Dv + d)];
                    }
                    const int64_t oi = ((b * c.S + t) * c.H + h) * c.Dv + d;
                    float g;
                    if (c.out_dt == FATTN_F32) {
                        std::memcpy(&g, &o1[size_t(oi) * 4], 4);
                    } else {
                        uint16_t hh;
                        std::memcpy(&hh, &o1[size_t(oi) * 2], 2);
                        g = from16(hh, c.out_dt);
                    }
                    if (m == -INFINITY && g != 0.f) ok = false;
                    omax = std::fmax(omax, std::fabs(r));
                    oerr = std::fmax(oerr, std::fabs(double(g) - r));
                }
            }
    const double otol = c.out_dt == FATTN_F32 ? 2e-6 : (c.out_dt == FATTN_BF16 ? 8e-3 : 1e-3);
    if (oerr > otol * omax) ok = false;
    std::printf("  B%lld S%lld H%lld Dv%lld parts %d  max|o-ref| / max|ref| %.2e  max lse err %.2e  %s\n",
                (long long)c.B, (long long)c.S, (long long)c.H, (long long)c.Dv, c.n, oerr / omax, lerr, ok ? "OK" : "FAIL");
    for (void *x : dev) cudaFree(x);
    cudaFree(o_out), cudaFree(l_out), cudaFree(pdev);
    return ok;
}

}  // namespace

int main() {
    const Case cases[] = {
        {2, 9, 3, 20, 1, FATTN_F32, FATTN_F32, 0},    {2, 9, 3, 20, 2, FATTN_F32, FATTN_F32, 5},
        {2, 9, 3, 20, 3, FATTN_F32, FATTN_F32, 0},    {2, 9, 3, 20, 17, FATTN_F32, FATTN_F32, 3},
        {1, 33, 4, 300, 3, FATTN_BF16, FATTN_F32, 8}, {1, 17, 2, 64, 4, FATTN_F16, FATTN_BF16, 0},
        {3, 64, 8, 128, 5, FATTN_BF16, FATTN_BF16, 0},
    };
    int pass = 0, n = 0;
    uint32_t seed = 1;
    for (const Case &c : cases) pass += run_case(c, seed++), ++n;
    std::printf("merge kernel: %d of %d cases OK\n", pass, n);
    return pass == n ? 0 : 1;
}
