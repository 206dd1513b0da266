// attn_nonfinite.cpp — the contract for scores that are not finite (docs/CONTRACT.md §3,
// "Overflow and NaN"), checked on the backend under test in test mode (cases "nonfinite_*").
//
// Scores are computed in f32. The contract:
//   - a row with a +inf score (scale·q·k past FLT_MAX) or a NaN one (a NaN in q, k or the bias):
//     o is NaN, lse is NaN or +inf, and the backward's dq of that row is not finite — never the
//     o = 0, lse = -inf of a fully masked row, which such rows returned before;
//   - a -inf score is a masked key whatever made it (a -inf bias, a window, or scale·q·k below
//     -FLT_MAX): a row whose every score is -inf is a fully masked row (o = 0, lse = -inf, dq 0);
//   - rows that see none of this are untouched by the others' NaNs in the forward.
// The oracle is not needed: every expectation is a class of value (NaN, 0, -inf, finite), and
// the finite rows are checked against their closed form (uniform attention: the mean of V).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "test/attn_judge.h"  // fmt
#include "test/backend_mem.h"
#include "test/registry.h"

namespace fattn_test {
namespace {

constexpr int64_t kSq = 4, kSkv = 40, kHq = 2, kHkv = 1, kD = 64;

// One [n0, n1, n2, n3] contiguous tensor on the backend, with its host copy as f32.
struct T {
    fattn_dtype dt;
    int64_t ne[4];
    std::vector<float> h;  // values (inputs) or the last download (outputs)
    DevBuf dev;
    fattn_tensor view{};
    int64_t n() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    bool init(BackendKind b, fattn_dtype t, int64_t a, int64_t s, int64_t hh, int64_t d) {
        dt = t, ne[0] = a, ne[1] = s, ne[2] = hh, ne[3] = d;
        h.assign(size_t(n()), 0.f);
        if (!dev.alloc(b, size_t(n()) * fattn_dtype_size(t))) return false;
        view = fattn_tensor_contiguous(dev.ptr(), t, a, s, hh, d);
        return dev.poison();
    }
    bool upload() {
        std::vector<unsigned char> raw(size_t(n()) * fattn_dtype_size(dt));
        for (int64_t i = 0; i < n(); ++i) fattn::store_f32(raw.data(), dt, i, h[size_t(i)]);
        return dev.upload(raw.data(), raw.size());
    }
    bool download() {
        std::vector<unsigned char> raw(size_t(n()) * fattn_dtype_size(dt));
        if (!dev.download(raw.data(), raw.size())) return false;
        for (int64_t i = 0; i < n(); ++i) h[size_t(i)] = fattn::load_f32(raw.data(), dt, i);
        return true;
    }
    float &at(int64_t b, int64_t s, int64_t hh, int64_t d) {
        return h[size_t(((b * ne[1] + s) * ne[2] + hh) * ne[3] + d)];
    }
};

struct Problem {
    T q, k, v, o, lse, dout, dq, dk, dv;
    T bias;                 // [1, 1, Sq, Skv] f32, broadcast over heads; used when has_bias
    bool has_bias = false;
    bool init(BackendKind b, fattn_dtype dt) {
        return bias.init(b, FATTN_F32, 1, 1, kSq, kSkv) && q.init(b, dt, 1, kSq, kHq, kD) && k.init(b, dt, 1, kSkv, kHkv, kD) &&
               v.init(b, dt, 1, kSkv, kHkv, kD) && o.init(b, dt, 1, kSq, kHq, kD) &&
               lse.init(b, FATTN_F32, 1, kHq, kSq, 1) && dout.init(b, dt, 1, kSq, kHq, kD) &&
               dq.init(b, dt, 1, kSq, kHq, kD) && dk.init(b, dt, 1, kSkv, kHkv, kD) &&
               dv.init(b, dt, 1, kSkv, kHkv, kD);
    }
    float lse_at(int64_t h, int64_t i) { return lse.h[size_t(h * kSq + i)]; }
};

// What a row must hold after the forward (and its dq after the backward).
enum class Row { UNIFORM, FINITE, POISONED, MASKED };

const char *row_name(Row r) {
    switch (r) {
    case Row::UNIFORM: return "uniform";
    case Row::FINITE: return "finite";
    case Row::POISONED: return "poisoned";
    case Row::MASKED: return "masked";
    }
    return "?";
}

// The two scenarios: which input makes which row what.
struct Scenario {
    const char *name;
    float scale;
    // Fills q, k, v, dout; returns each row's expectation in rows[h][i].
    void (*fill)(Problem &p, Row rows[kHq][kSq]);
};

float pseudo(uint32_t i) {  // a fixed value in [-1, 1): inputs need no RNG state
    i = i * 2654435761u + 12345u;
    i ^= i >> 13, i *= 0x5bd1e995u, i ^= i >> 15;
    return float(i & 0xffff) / 32768.f - 1.f;
}

// scale = 2^126 (the largest the API takes), keys k_j = (1, ±1, 0, ...). Head 0's query rows:
//   0: q = 0            scores 0: uniform attention (o = mean of V)
//   1: q = (4, 0, ...)  scores 2^128 = +inf for every key            -> poisoned
//   2: q = (0, 4, ...)  scores ±inf by key                            -> poisoned
//   3: q = (-4, 0, ...) scores -inf for every key (negative overflow) -> masked
// Head 1's rows are all q = 0 (uniform).
void fill_overflow(Problem &p, Row rows[kHq][kSq]) {
    for (int64_t j = 0; j < kSkv; ++j) {
        p.k.at(0, j, 0, 0) = 1.f;
        p.k.at(0, j, 0, 1) = (j * 7) % 3 == 0 ? 1.f : -1.f;
    }
    p.q.at(0, 1, 0, 0) = 4.f;
    p.q.at(0, 2, 0, 1) = 4.f;
    p.q.at(0, 3, 0, 0) = -4.f;
    const Row h0[kSq] = {Row::UNIFORM, Row::POISONED, Row::POISONED, Row::MASKED};
    for (int i = 0; i < kSq; ++i) rows[0][i] = h0[i], rows[1][i] = Row::UNIFORM;
}

// Default scale, random inputs, one NaN in q (head 0, row 1): that row is poisoned, every other
// row (head 1 shares the kv head) is finite.
void fill_nan(Problem &p, Row rows[kHq][kSq]) {
    for (size_t i = 0; i < p.q.h.size(); ++i) p.q.h[i] = pseudo(uint32_t(i));
    for (size_t i = 0; i < p.k.h.size(); ++i) p.k.h[i] = pseudo(uint32_t(i + 100000));
    p.q.at(0, 1, 0, 5) = NAN;
    for (int h = 0; h < kHq; ++h)
        for (int i = 0; i < kSq; ++i) rows[h][i] = Row::FINITE;
    rows[0][1] = Row::POISONED;
}

// Default scale, random inputs, a random bias with one NaN (row 2, key 5): row 2 of both heads
// is poisoned (the bias broadcasts over heads); a -inf column (key 9) is an ordinary mask.
void fill_nan_bias(Problem &p, Row rows[kHq][kSq]) {
    for (size_t i = 0; i < p.q.h.size(); ++i) p.q.h[i] = pseudo(uint32_t(i + 400000));
    for (size_t i = 0; i < p.k.h.size(); ++i) p.k.h[i] = pseudo(uint32_t(i + 500000));
    for (size_t i = 0; i < p.bias.h.size(); ++i) p.bias.h[i] = pseudo(uint32_t(i + 600000));
    for (int64_t i = 0; i < kSq; ++i) p.bias.h[size_t(i * kSkv + 9)] = -INFINITY;
    p.bias.h[size_t(2 * kSkv + 5)] = NAN;
    p.has_bias = true;
    for (int h = 0; h < kHq; ++h)
        for (int i = 0; i < kSq; ++i) rows[h][i] = i == 2 ? Row::POISONED : Row::FINITE;
}

const Scenario kScenarios[] = {
    {"overflow", 0x1p126f, fill_overflow},
    {"nan_q", 0.f, fill_nan},
    {"nan_bias", 0.f, fill_nan_bias},
};

struct Arm {
    const char *name;
    fattn_dtype dt;
    fattn_prec prec;
    fattn_algo algo;
};

// Runs one scenario on one arm; "" if the contract held, else what broke.
std::string run_one(fattn_ctx_t *ctx, BackendKind bk, const Scenario &sc, const Arm &arm, bool *skipped) {
    Problem p;
    if (!p.init(bk, arm.dt)) return "cannot allocate buffers";
    Row rows[kHq][kSq];
    sc.fill(p, rows);
    for (size_t i = 0; i < p.v.h.size(); ++i) p.v.h[i] = pseudo(uint32_t(i + 200000));
    for (size_t i = 0; i < p.dout.h.size(); ++i) p.dout.h[i] = pseudo(uint32_t(i + 300000));
    if (!p.q.upload() || !p.k.upload() || !p.v.upload() || !p.dout.upload() || !p.bias.upload())
        return "cannot upload inputs";

    fattn_attn_params ap = fattn_attn_params_default();
    ap.scale = sc.scale;
    ap.prec = arm.prec;
    ap.algo = arm.algo;
    if (p.has_bias) ap.bias = p.bias.view;
    char why[256] = "";
    if (fattn_attn_supports(ctx, &ap, &p.q.view, &p.k.view, &p.v.view, why, sizeof why) != FATTN_OK) {
        *skipped = true;
        return why;
    }
    size_t saved_bytes = 0;
    if (fattn_attn_saved_size(ctx, &ap, &p.q.view, &p.k.view, &p.v.view, &saved_bytes) != FATTN_OK)
        return std::string("saved_size: ") + fattn_ctx_last_error(ctx);
    DevBuf saved;
    if (saved_bytes && !saved.alloc(bk, saved_bytes)) return "cannot allocate the saved buffer";
    fattn_status st = fattn_attn_fwd(ctx, &ap, &p.q.view, &p.k.view, &p.v.view, &p.o.view, &p.lse.view,
                                     saved.ptr(), nullptr, 0);
    if (st != FATTN_OK) return std::string("fwd: ") + fattn_ctx_last_error(ctx);
    st = fattn_attn_bwd(ctx, &ap, &p.q.view, &p.k.view, &p.v.view, &p.o.view, &p.lse.view, saved.ptr(),
                        &p.dout.view, &p.dq.view, &p.dk.view, &p.dv.view, nullptr, 0);
    if (st != FATTN_OK) return std::string("bwd: ") + fattn_ctx_last_error(ctx);
    backend_sync(bk);
    if (!p.o.download() || !p.lse.download() || !p.dq.download() || !p.dk.download() || !p.dv.download())
        return "cannot download outputs";

    const float tol = arm.dt == FATTN_F32 && arm.prec == FATTN_PREC_F32 ? 1e-5f : 2e-2f;
    bool any_poisoned = false;
    for (int h = 0; h < kHq; ++h)
        for (int i = 0; i < kSq; ++i) {
            const Row r = rows[h][i];
            const float l = p.lse_at(h, i);
            any_poisoned |= r == Row::POISONED;
            auto bad = [&](const char *what, float x, int64_t d) {
                return fmt("head %d row %d (%s): %s = %g at d %lld", h, i, row_name(r), what, double(x),
                           (long long)d);
            };
            // lse
            if (r == Row::POISONED && !(std::isnan(l) || l == INFINITY)) return bad("lse (want NaN or +inf)", l, 0);
            if (r == Row::MASKED && l != -INFINITY) return bad("lse (want -inf)", l, 0);
            if ((r == Row::UNIFORM || r == Row::FINITE) && !std::isfinite(l)) return bad("lse (want finite)", l, 0);
            for (int64_t d = 0; d < kD; ++d) {
                const float x = p.o.at(0, i, h, d);
                if (r == Row::POISONED && !std::isnan(x)) return bad("o (want NaN)", x, d);
                if (r == Row::MASKED && x != 0.f) return bad("o (want 0)", x, d);
                if (r == Row::FINITE && !std::isfinite(x)) return bad("o (want finite)", x, d);
                if (r == Row::UNIFORM) {
                    double mean = 0;
                    for (int64_t j = 0; j < kSkv; ++j) mean += p.v.at(0, j, 0, d);
                    mean /= double(kSkv);
                    if (!(std::fabs(x - mean) <= tol)) return bad("o (want the mean of V)", x, d);
                }
                const float g = p.dq.at(0, i, h, d);
                if (r == Row::POISONED && std::isfinite(g)) return bad("dq (want not finite)", g, d);
                if (r == Row::MASKED && g != 0.f) return bad("dq (want 0)", g, d);
                if (r == Row::FINITE && !std::isfinite(g)) return bad("dq (want finite)", g, d);
            }
        }
    // A poisoned row reaches every key's dk through dS: none of them may look finite and valid
    // (a key the bias masks for every row is reached by none; 0 or NaN are both right there).
    auto masked_column = [&](int64_t j) {
        if (!p.has_bias) return false;
        for (int64_t i = 0; i < kSq; ++i)
            if (p.bias.h[size_t(i * kSkv + j)] != -INFINITY) return false;
        return true;
    };
    if (any_poisoned)
        for (int64_t j = 0; j < kSkv; ++j)
            for (int64_t d = 0; d < kD && !masked_column(j); ++d)
                if (std::isfinite(p.dk.at(0, j, 0, d)))
                    return fmt("dk[key %lld, d %lld] = %g is finite beside a poisoned row", (long long)j,
                               (long long)d, double(p.dk.at(0, j, 0, d)));
    return "";
}

int run_nonfinite(const Options &o, Summary &s) {
    if (o.mode != Mode::TEST) return 0;
    const bool cuda = o.backend == BackendKind::CUDA;
    const Arm arms[] = {
        {"f32", FATTN_F32, FATTN_PREC_F32, FATTN_ALGO_FUSED},
        {"f32_auto", FATTN_F32, FATTN_PREC_AUTO, FATTN_ALGO_FUSED},
        {"bf16", FATTN_BF16, FATTN_PREC_AUTO, FATTN_ALGO_FUSED},
        {"f16", FATTN_F16, FATTN_PREC_AUTO, FATTN_ALGO_FUSED},
        {"f32_exact", FATTN_F32, FATTN_PREC_AUTO, FATTN_ALGO_EXACT},
        {"bf16_exact", FATTN_BF16, FATTN_PREC_AUTO, FATTN_ALGO_EXACT},
    };
    std::string why;
    std::unique_ptr<fattn_ctx_t, void (*)(fattn_ctx_t *)> ctx(make_ctx(o.backend, o.threads, &why, o.family),
                                                              fattn_ctx_free);
    for (const Scenario &sc : kScenarios)
        for (const Arm &a : arms) {
            const std::string name = fmt("nonfinite_%s_%s", sc.name, a.name);
            if (!selected(o, name)) continue;
            if (o.quick && std::strcmp(a.name, "f32") != 0 && std::strcmp(a.name, "bf16") != 0) continue;
            if (!o.algo_exact && a.algo == FATTN_ALGO_EXACT) continue;
            if (!o.algo_fused && a.algo == FATTN_ALGO_FUSED) continue;
            if (!ctx) {
                record(s, Outcome::FAIL, name, "cannot create the requested backend: " + why);
                continue;
            }
            Arm arm = a;
            if (o.prec != FATTN_PREC_AUTO) arm.prec = o.prec;
            bool skipped = false;
            const std::string err = run_one(ctx.get(), o.backend, sc, arm, &skipped);
            if (skipped) record(s, Outcome::SKIP, name, "not supported here: " + err);
            else record(s, err.empty() ? Outcome::PASS : Outcome::FAIL, name,
                        err.empty() ? std::string(cuda ? "contract held (cuda)" : "contract held") : err);
        }
    return 0;
}

const bool registered = register_family({"nonfinite", run_nonfinite});

}  // namespace
}  // namespace fattn_test
