// presets.cpp — the named case lists of fattn-bench (`--preset NAME`, `--preset list`).
//
// Geometries: HOT-Step's trainers (LESSONS.md) — DiT windowed self-attention (a ±W band given as
// a dense -inf bias), full self-attention with no mask, cross-attention to a text encoder with
// Skv = 1877, and a causal LM with GQA 32q/8kv — and the peer shapes of TARGETS.md (B·S = 16k,
// Hq·D = 2048 for bf16; B·S = 8k, H 16 for f32). The DiT head geometry (H 16, D 64) and the
// band width (±128) are our choice: LESSONS.md gives the sites and S, not the head layout.
#include <cstdio>

#include "bench/bench.h"

namespace fbench {
namespace {

Case mk(const std::string &site, const std::string &name, int64_t B, int64_t Sq, int64_t Skv,
        int64_t Hq, int64_t Hkv, int64_t D, fattn_dtype dt, fattn_causal causal = FATTN_CAUSAL_NONE,
        int64_t band = -1, const std::string &peer = "") {
    Case c;
    c.site = site;
    c.name = name;
    c.B = B; c.Sq = Sq; c.Skv = Skv; c.Hq = Hq; c.Hkv = Hkv; c.D = D;
    c.dtype = dt;
    c.causal = causal;
    c.band = band;
    c.peer = peer;
    return c;
}

constexpr int64_t kBand = 128;       // DiT windowed site: ±128 keys
constexpr int64_t kCrossKv = 1877;   // DiT cross-attention: text-encoder length

// The four HOT-Step geometries at one S (DiT sites f32; the LM site in the given dtype).
void hotstep(std::vector<Case> *v, int64_t S, int64_t lm_S, fattn_dtype lm_dt) {
    const std::string s = "S=" + std::to_string(S);
    v->push_back(mk("windowed", "DiT windowed self (band ±128 as -inf bias) " + s, 1, S, S, 16, 16, 64,
                    FATTN_F32, FATTN_CAUSAL_NONE, kBand));
    v->push_back(mk("full", "DiT full self, no mask " + s, 1, S, S, 16, 16, 64, FATTN_F32));
    v->push_back(mk("cross", "DiT cross Skv=1877 " + s, 1, S, kCrossKv, 16, 16, 64, FATTN_F32));
    v->push_back(mk("lm", "LM causal GQA 32q/8kv D128 S=" + std::to_string(lm_S), 1, lm_S, lm_S, 32, 8,
                    128, lm_dt, FATTN_CAUSAL_BOTTOM_RIGHT));
}

// HOT-Step's per-site table: fused vs exact, fwd+bwd, S = 625 / 1250 / 3000, f32 (TF32 on CUDA).
void sites(std::vector<Case> *v) {
    for (int64_t S : {625, 1250, 3000}) {
        const std::string s = " S=" + std::to_string(S);
        v->push_back(mk("windowed", "site windowed (band ±128 bias)" + s, 1, S, S, 16, 16, 64, FATTN_F32,
                        FATTN_CAUSAL_NONE, kBand));
        v->push_back(mk("full", "site full self" + s, 1, S, S, 16, 16, 64, FATTN_F32));
        v->push_back(mk("cross", "site cross Skv=1877" + s, 1, S, kCrossKv, 16, 16, 64, FATTN_F32));
    }
}

// TARGETS.md's bf16 shapes (self-attention, Sq = Skv = S; causal: bottom-right) and the peers' times.
struct Bf16Target {
    const char *name;
    int64_t B, S, Hq, Hkv, D;
    bool causal;
    const char *peer;
};
const Bf16Target kBf16Targets[] = {
    {"bf16 D64 S4096 B4 H32", 4, 4096, 32, 32, 64, false, "cuDNN 4.33 / FA2 7.09 ms"},
    {"bf16 D64 S16384 B1 H32", 1, 16384, 32, 32, 64, false, "cuDNN 17.1 / FA2 26.4 / FA2-det 38.8 ms"},
    {"bf16 D64 S16384 B1 H32 causal", 1, 16384, 32, 32, 64, true, "cuDNN 8.86 / FA2 13.9 / FA2-det 21.0 ms"},
    {"bf16 D128 S4096 B4 H16", 4, 4096, 16, 16, 128, false, "cuDNN 3.36 / FA2 6.37 / FA2-det 8.44 ms"},
    {"bf16 D128 S4096 B4 H16 causal", 4, 4096, 16, 16, 128, true, "cuDNN 1.99 / FA2 3.64 / FA2-det 4.92 ms"},
    {"bf16 D128 S16384 B1 H16", 1, 16384, 16, 16, 128, false, "cuDNN 13.9 / FA2 24.3 / FA2-det 39.8 ms"},
    {"bf16 D128 S16384 B1 H16 causal", 1, 16384, 16, 16, 128, true, "cuDNN 7.20 / FA2 12.4 / FA2-det 20.7 ms"},
    {"bf16 D128 GQA 32q/8kv S8192 causal", 1, 8192, 32, 8, 128, true, "cuDNN 3.62 / FA2 6.78 / FA2-det 10.1 ms"},
};

void targets_bf16(std::vector<Case> *v) {
    for (const Bf16Target &t : kBf16Targets)
        v->push_back(mk("bf16", t.name, t.B, t.S, t.S, t.Hq, t.Hkv, t.D, FATTN_BF16,
                        t.causal ? FATTN_CAUSAL_BOTTOM_RIGHT : FATTN_CAUSAL_NONE, -1, t.peer));
}

// Seconds per rep: kept out of `targets` so gpu-check stays within its time budget.
void targets_long(std::vector<Case> *v) {
    v->push_back(mk("bf16", "bf16 D128 H16 S65536 causal", 1, 65536, 65536, 16, 16, 128, FATTN_BF16,
                    FATTN_CAUSAL_BOTTOM_RIGHT, -1, "cuDNN 110 / FA2 188 ms"));
}

void targets_f32(std::vector<Case> *v) {
    v->push_back(mk("f32", "f32 D64 S4096 B2 H16", 2, 4096, 4096, 16, 16, 64, FATTN_F32, FATTN_CAUSAL_NONE,
                    -1, "mem-eff f32 14.0 / math TF32 10.7 / math fp32 17.8 ms"));
    v->push_back(mk("f32", "f32 D128 S4096 B2 H16", 2, 4096, 4096, 16, 16, 128, FATTN_F32,
                    FATTN_CAUSAL_NONE, -1, "mem-eff f32 25.0 / math TF32 11.4 / math fp32 24.7 ms"));
}

void targets_mask(std::vector<Case> *v) {
    v->push_back(mk("mask", "bf16 band ±256 as -inf bias S4096 B1 H16 D128", 1, 4096, 4096, 16, 16, 128,
                    FATTN_BF16, FATTN_CAUSAL_NONE, 256, "cuDNN 1.68 / mem-eff 4.08 / math 7.74 ms"));
    v->push_back(mk("mask", "f32 band ±256 as -inf bias S4096 B1 H16 D128", 1, 4096, 4096, 16, 16, 128,
                    FATTN_F32, FATTN_CAUSAL_NONE, 256, "mem-eff 13.8 / math 7.00 ms"));
}

struct Preset {
    const char *name;
    const char *what;
};
const Preset kPresets[] = {
    {"small", "default: a few small CPU-sized cases (full, causal GQA, cross, band bias); seconds"},
    {"hotstep", "HOT-Step geometries: windowed (band bias), full, cross Skv=1877, causal LM GQA 32q/8kv"},
    {"hotstep-sites", "HOT-Step per-site table: windowed/full/cross at S = 625/1250/3000, f32 (TF32 on CUDA)"},
    {"cpu-scaling", "CPU: S = 1024/2048/4096 x D 64/128, f32, 2 threads, B1 H4"},
    {"targets-bf16", "TARGETS.md bf16 fwd+bwd shapes (B·S = 16k, Hq·D = 2048)"},
    {"targets-f32", "TARGETS.md f32 shapes (B·S = 8k, H16, D 64/128, S 4096)"},
    {"targets-mask", "TARGETS.md ±256 window as a dense -inf bias, S 4096, bf16 and f32"},
    {"targets", "targets-bf16 + targets-f32 + targets-mask"},
    {"targets-long", "TARGETS.md bf16 D128 H16 S65536 causal (seconds per rep)"},
    {"gpu-quick", "CUDA smoke: hotstep geometries at S=1024 + one bf16 and one f32 target"},
};

}  // namespace

void list_presets() {
    for (const Preset &p : kPresets) std::printf("  %-14s %s\n", p.name, p.what);
}

bool preset_cases(const std::string &name, fattn_backend backend, std::vector<Case> *out,
                  Options *opt) {
    const bool cuda = backend == FATTN_BACKEND_CUDA;
    std::vector<Case> &v = *out;
    if (name == "small") {
        v.push_back(mk("full", "full self S=512 H4 D64", 1, 512, 512, 4, 4, 64, FATTN_F32));
        v.push_back(mk("lm", "causal GQA 8q/2kv S=512 D64", 1, 512, 512, 8, 2, 64, FATTN_F32,
                       FATTN_CAUSAL_BOTTOM_RIGHT));
        v.push_back(mk("cross", "cross Sq=256 Skv=469 H4 D64", 2, 256, 469, 4, 4, 64, FATTN_F32));
        v.push_back(mk("windowed", "band ±64 as -inf bias S=512 H4 D64", 1, 512, 512, 4, 4, 64,
                       FATTN_F32, FATTN_CAUSAL_NONE, 64));
    } else if (name == "hotstep") {
        if (cuda)
            hotstep(&v, 3000, 4096, FATTN_F32);
        else
            hotstep(&v, 1024, 1024, FATTN_F32);
    } else if (name == "hotstep-sites") {
        sites(&v);
    } else if (name == "cpu-scaling") {
        for (int64_t D : {64, 128})
            for (int64_t S : {1024, 2048, 4096})
                v.push_back(mk("D" + std::to_string(D), "f32 S=" + std::to_string(S) + " D" +
                                   std::to_string(D) + " B1 H4",
                               1, S, S, 4, 4, D, FATTN_F32));
        if (!opt->threads_set) opt->threads = 2;
        if (opt->reps < 0) opt->reps = 3;  // S = 4096 takes seconds per rep on 2 cores
    } else if (name == "targets-bf16") {
        targets_bf16(&v);
    } else if (name == "targets-f32") {
        targets_f32(&v);
    } else if (name == "targets-mask") {
        targets_mask(&v);
    } else if (name == "targets") {
        targets_bf16(&v);
        targets_f32(&v);
        targets_mask(&v);
    } else if (name == "targets-long") {
        targets_long(&v);
    } else if (name == "gpu-quick") {
        hotstep(&v, 1024, 2048, FATTN_BF16);
        v.push_back(mk("bf16", "bf16 D128 S4096 B4 H16 causal", 4, 4096, 4096, 16, 16, 128, FATTN_BF16,
                       FATTN_CAUSAL_BOTTOM_RIGHT, -1, "cuDNN 1.99 / FA2 3.64 / FA2-det 4.92 ms"));
        targets_f32(&v);
    } else {
        return false;
    }
    return true;
}

}  // namespace fbench
