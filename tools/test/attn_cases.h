// attn_cases.h — the softmax-attention case of fattn-test: one plain struct per case, set up
// with chained setters so the table in attn_cases.cpp reads as a list (one line per case).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "fattn/fattn.h"
#include "test/registry.h"

namespace fattn_test {

enum class BiasKind {
    NONE,
    DENSE,       // [B, Hq, Sq, Skv] random
    BCAST,       // [1, 1, Sq, Skv] random (broadcast over B and H by ne = 1)
    KEYPAD,      // [B, 1, 1, Skv] as [B, 1, Sq, Skv] with query stride 0: 0 or -inf per key
    NEG_BAND,    // [1, Hq, Sq, Skv]: random inside |i - j| <= w, -inf outside (a window as a bias)
    NEG_TRI,     // [1, 1, Sq, Skv]: 0 for j <= i, -inf above (causal as a bias)
    NEG_ROWCOL,  // [B, Hq, Sq, Skv] random with whole rows and whole key columns at -inf
    // Hugging Face-style padding masks, [B, 1, Sq, Skv] with the case's pad value (finfo.min,
    // -1e9, -1e4 or -inf; clamped to the bias dtype's lowest finite value when finite):
    PAD,         // pad where key j >= kv_valid(b) or row i >= q_valid(b) (rows past q_valid
                 // fully masked by the pad value), 0 elsewhere
    PAD_RAND,    // the same, random values elsewhere
    LPAD_KEYS,   // left padding of the keys only: pad where j < kv_pad(b), 0 elsewhere; with a
                 // top-left causal mask, rows i < kv_pad(b) see only padded keys
    KEYROW,      // [B, 1, 1, Skv] random, viewed like KEYPAD (query stride 0)
    STRIDE0,     // [1, Hq, 1, Skv] random stored, viewed as [B, Hq, Sq, Skv] with batch and
                 // query strides 0 (an expanded tensor)
};

enum class Layout {
    CONTIG,     // [B, S, H, D] contiguous
    FUSED_QKV,  // q, k, v (and dq, dk, dv) strided views of one [B, S, Hq·D + Hkv·D + Hkv·Dv]
                // buffer; o and dout with a padded token stride
    BHSD,       // every tensor stored [B, H, S, D] and viewed through transposed strides
    ODD_KV,     // k and v one element into their buffers, token stride Hkv·D + 1: no 16-byte
                // alignment anywhere (the sm90 tf32 pre-pass's element-wise path)
};

enum class AlgoSel { BOTH, FUSED, EXACT };

struct AttnCase {
    std::string name;
    int64_t B = 1, Sq = 16, Skv = 16, Hq = 1, Hkv = 1, D = 64, Dv = 64;
    fattn_dtype dtype = FATTN_F32;
    BiasKind bias = BiasKind::NONE;
    fattn_dtype bias_dtype = FATTN_F32;
    fattn_causal causal = FATTN_CAUSAL_NONE;
    int64_t win_left = -1, win_right = -1;
    fattn_align win_align = FATTN_ALIGN_TOP_LEFT;
    std::vector<int> seqlens_q, seqlens_kv;  // non-empty: varlen (views have B = 1)
    Layout layout = Layout::CONTIG;
    fattn_prec prec = FATTN_PREC_AUTO;
    AlgoSel algo = AlgoSel::BOTH;
    float scale = 0.0f;        // 0: the library's default 1/sqrt(D)
    float pad_value = -INFINITY;  // PAD / PAD_RAND / LPAD_KEYS: the masked entries' value
    bool large = false;        // CUDA-sized: skipped on the CPU unless named with -p
    bool extra = false;        // only with --extra
    bool quick = false;        // part of the --quick subset
    bool dbias = false;        // the backward also asks for dbias (FATTN_ATTN_WANT_DBIAS): a
                               // backend that does not support it skips the case, with the reason

    explicit AttnCase(std::string n) : name(std::move(n)) {}
    AttnCase &shape(int64_t b, int64_t sq, int64_t skv, int64_t hq, int64_t hkv, int64_t d) {
        B = b, Sq = sq, Skv = skv, Hq = hq, Hkv = hkv, D = d, Dv = d;
        return *this;
    }
    AttnCase &dv(int64_t x) { Dv = x; return *this; }
    AttnCase &dt(fattn_dtype t) { dtype = t; bias_dtype = t == FATTN_F32 ? FATTN_F32 : t; return *this; }
    AttnCase &with_bias(BiasKind k) { bias = k; return *this; }
    AttnCase &bias_dt(fattn_dtype t) { bias_dtype = t; return *this; }
    AttnCase &causal_(fattn_causal c) { causal = c; return *this; }
    AttnCase &window(int64_t l, int64_t r, fattn_align a) { win_left = l, win_right = r, win_align = a; return *this; }
    AttnCase &varlen(std::vector<int> q, std::vector<int> kv) { seqlens_q = std::move(q), seqlens_kv = std::move(kv); return *this; }
    AttnCase &layout_(Layout l) { layout = l; return *this; }
    AttnCase &prec_(fattn_prec p) { prec = p; return *this; }
    AttnCase &algo_(AlgoSel a) { algo = a; return *this; }
    AttnCase &scale_(float s) { scale = s; return *this; }
    AttnCase &pad(BiasKind k, float v) { bias = k, pad_value = v; return *this; }
    AttnCase &is_large() { large = true; return *this; }
    AttnCase &is_extra() { extra = true; return *this; }
    AttnCase &is_quick() { quick = true; return *this; }
    AttnCase &want_dbias() { dbias = true; return *this; }

    bool is_varlen() const { return !seqlens_q.empty(); }
};

// The table (attn_cases.cpp).
const std::vector<AttnCase> &attn_cases();

// Runs the table in the mode of o (attn_run.cpp).
int run_attn_family(const Options &o, Summary &s);

}  // namespace fattn_test
