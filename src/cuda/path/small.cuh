// small.cuh — the PaTH kernels that are not matrix work: the gate's prefix sums (forward) and
// reverse prefix sums (dg), the STRICT w / beta check, and delta = rowsum(o * dout).
// Sums run in a fixed order (a two-level scan: per-thread runs, then the run totals), so every
// result is bitwise repeatable.
#pragma once

#include "cuda/path/common.cuh"

namespace fattn::pathk {

// G[t] = sum_{u <= t} g[u] per (sequence, query head); grid (num_seqs, Hq). reverse: dg[t] =
// sum_{u >= t} dG[u] (dG from the workspace, into the user's dg view).
template <bool Reverse> struct KScan {
    static constexpr int kThreads = 128;
    static constexpr size_t smem() { return kThreads * sizeof(float); }
    PK_DEV static float in(const PathDev &p, const SeqInfo &sq, int hq, int64_t t) {
        if (Reverse) return p.dgs[(sq.row0 + t) * p.hq + hq];
        return p.g[sq.b * p.g_sb + (sq.begin + t) * p.g_ss + hq * p.g_sh];
    }
    PK_DEV static void out(const PathDev &p, const SeqInfo &sq, int hq, int64_t t, float x) {
        if (Reverse) p.dg[sq.b * p.dg_sb + (sq.begin + t) * p.dg_ss + hq * p.dg_sh] = x;
        else p.gsum[(sq.row0 + t) * p.hq + hq] = x;
    }
    PK_DEV static void run(const PathDev &p, char *smem) {
        float *part = reinterpret_cast<float *>(smem);
        const SeqInfo sq = seq_info(p, bid_x());
        const int hq = bid_y();
        const int64_t per = ceil_div(sq.len, kThreads);
        // thread i owns run i (Reverse: run i counts from the end)
        const int64_t a = per * tid(), e = a + per < sq.len ? a + per : sq.len;
        auto tok = [&](int64_t i) { return Reverse ? sq.len - 1 - i : i; };
        float s = 0.f;
        for (int64_t i = a; i < e; ++i) s += in(p, sq, hq, tok(i));
        part[tid()] = s;
        sync();
        if (tid() == 0) {
            float acc = 0.f;
            for (int i = 0; i < kThreads; ++i) {
                const float x = part[i];
                part[i] = acc;
                acc += x;
            }
        }
        sync();
        float acc = part[tid()];
        for (int64_t i = a; i < e; ++i) {
            acc += in(p, sq, hq, tok(i));
            out(p, sq, hq, tok(i), acc);
        }
    }
};

// STRICT check: | |w_t| - 1 | <= tol and beta_t in [0, 2], finite; the smallest offending
// row * H + h goes to p.bad (an integer minimum: the same whatever the order). grid: rows*H/128.
struct KCheck {
    static constexpr int kThreads = 128;
    static constexpr size_t smem() { return 0; }
    PK_DEV static void run(const PathDev &p, char *) {
        const double tol = p.check_tol;
        const int64_t i = int64_t(bid_x()) * kThreads + tid();
        if (i >= p.B * p.T * p.h) return;
        const int64_t row = i / p.h, hh = i % p.h, b = row / p.T, t = row % p.T;
        const float *w = p.w + b * p.w_sb + t * p.w_ss + hh * p.w_sh;
        double n2 = 0;
        for (int d = 0; d < p.K; ++d) n2 += double(w[d]) * double(w[d]);
        const float be = p.beta[b * p.beta_sb + t * p.beta_ss + hh * p.beta_sh];
        const double nrm = sqrt(n2);
        const bool ok = (nrm - 1.0 <= tol && 1.0 - nrm <= tol) && (be >= 0.f && be <= 2.f);
        if (!ok) atomic_min_u64(p.bad, static_cast<unsigned long long>(i));
    }
};

// delta[row, hq] = sum_v o * dout (f32, fixed order): eight lanes per (row, query head), each
// summing its own columns (16-byte loads where o and dout allow them), then a fixed shuffle tree.
// grid: rows * Hq / kRows.
template <typename Tin> struct KDelta {
    static constexpr int kThreads = 256, kLanes = 8, kRows = kThreads / kLanes;
    static constexpr size_t smem() { return 0; }
    PK_DEV static void run(const PathDev &p, char *) {
        constexpr int EPV = 16 / int(sizeof(Tin));
        const int64_t i = int64_t(bid_x()) * kRows + tid() / kLanes;
        const int sub = tid() % kLanes;
        float s = 0.f;
        if (i < p.B * p.T * p.hq) {
            const int64_t row = i / p.hq, hq = i % p.hq, b = row / p.T, t = row % p.T;
            const Tin *o = static_cast<const Tin *>(p.o) + b * p.o_sb + t * p.o_ss + hq * p.o_sh;
            const Tin *d = static_cast<const Tin *>(p.dout) + b * p.do_sb + t * p.do_ss + hq * p.do_sh;
            if (p.vec_o && p.vec_do) {  // both imply V % EPV == 0 (sequence.h)
                for (int c = sub * EPV; c < p.V; c += kLanes * EPV) {
                    const V16 x = ld16(o + c), y = ld16(d + c);
                    for (int e = 0; e < EPV; ++e) s += v16_elem<Tin>(x, e) * v16_elem<Tin>(y, e);
                }
            } else {
                for (int c = sub; c < p.V; c += kLanes) s += to_f(o[c]) * to_f(d[c]);
            }
        }
        s += shfl_xor(s, 4);
        s += shfl_xor(s, 2);
        s += shfl_xor(s, 1);
        if (sub == 0 && i < p.B * p.T * p.hq) p.delta[i] = s;
    }
};

}  // namespace fattn::pathk
