// attn_cases.cpp — the softmax-attention case table of fattn-test, and its registration.
//
// One line per case: shape (B, Sq, Skv, Hq, Hkv, D), then what it exercises. Names say it, so
// `-p REGEX` selects by feature ("causal", "varlen", "bf16", ...). Every case runs with the
// FUSED and the EXACT algorithm unless it says otherwise. The table covers: every dtype, every
// bias kind, causal (both alignments), windows (both alignments), GQA/MQA at B > 1, Skv != Sq,
// varlen with empty and length-1 sequences, fused-QKV and transposed views, fully-masked rows
// and key columns, sizes that divide no tile (S = 1, 17, 97, 257, 1025; D = 40, 80, 96), and
// the bias gradient (the dbias_ cases) for every broadcast pattern of the bias.
#include "test/attn_cases.h"

#include <cfloat>
#include <cmath>

namespace fattn_test {

namespace {

using C = AttnCase;
constexpr fattn_dtype F32 = FATTN_F32, F16 = FATTN_F16, BF16 = FATTN_BF16;
constexpr fattn_causal TL = FATTN_CAUSAL_TOP_LEFT, BR = FATTN_CAUSAL_BOTTOM_RIGHT;
constexpr fattn_align ATL = FATTN_ALIGN_TOP_LEFT, ABR = FATTN_ALIGN_BOTTOM_RIGHT;

std::vector<AttnCase> make_table() {
    return {
        // ---- plain shapes, sizes that divide no tile
        C("plain_s1").shape(1, 1, 1, 1, 1, 64).is_quick(),
        C("plain_s17").shape(2, 17, 17, 2, 2, 64).is_quick(),
        C("plain_s97").shape(1, 97, 97, 2, 2, 64),
        C("plain_s257").shape(1, 257, 257, 2, 2, 64),
        C("plain_s1025").shape(1, 1025, 1025, 1, 1, 64),
        C("plain_d40").shape(2, 33, 33, 2, 2, 40).is_quick(),
        C("plain_d80").shape(1, 65, 65, 2, 2, 80),
        C("plain_d96").shape(1, 50, 50, 2, 2, 96),
        C("plain_d128").shape(1, 70, 70, 2, 2, 128),
        // head dims 129-256 (the tensor-core families' bucket 256)
        C("plain_d256").shape(1, 70, 70, 2, 2, 256),
        C("causal_d160_gqa").shape(2, 97, 97, 4, 2, 160).causal_(TL),
        C("bias_d192_bf16").shape(1, 60, 80, 2, 2, 192).dt(BF16).with_bias(BiasKind::DENSE),
        C("window_d256_f16_cross").shape(1, 50, 97, 2, 1, 256).dt(F16).window(8, 0, ABR),
        // 16-bit D 160 (a part-filled panel on the sm90 kernels of D 256): two query tiles, five
        // 64-key steps, keys no row sees
        C("bf16_d160_causal_br_gqa").shape(1, 200, 300, 4, 2, 160).dt(BF16).causal_(BR),
        C("plain_d32").shape(2, 40, 40, 3, 3, 32),
        C("plain_dv_ne_d").shape(1, 31, 31, 2, 2, 64).dv(32),
        C("plain_scale").shape(1, 29, 29, 2, 2, 64).scale_(0.3f),
        // ---- dtypes
        C("f16_s97").shape(1, 97, 97, 2, 2, 64).dt(F16).is_quick(),
        C("bf16_s97").shape(1, 97, 97, 2, 2, 64).dt(BF16).is_quick(),
        C("f16_d80_causal").shape(2, 57, 57, 2, 1, 80).dt(F16).causal_(BR),
        C("bf16_d96_window").shape(1, 90, 90, 2, 2, 96).dt(BF16).window(16, 8, ATL),
        C("bf16_s1025_causal").shape(1, 1025, 1025, 1, 1, 64).dt(BF16).causal_(BR),
        C("f16_s257_gqa").shape(2, 257, 257, 4, 2, 64).dt(F16),
        // ---- cross attention, Skv != Sq
        C("cross_sq17_skv97").shape(2, 17, 97, 2, 2, 64).is_quick(),
        C("cross_sq97_skv17").shape(1, 97, 17, 2, 2, 64),
        C("cross_sq1_skv257").shape(1, 1, 257, 2, 2, 64),
        C("cross_sq257_skv1").shape(1, 257, 1, 2, 2, 64),
        C("cross_bf16_skv300").shape(1, 64, 300, 2, 2, 80).dt(BF16),
        // ---- causal, both alignments, square and not
        C("causal_tl_s97").shape(1, 97, 97, 2, 2, 64).causal_(TL).is_quick(),
        C("causal_br_s97").shape(1, 97, 97, 2, 2, 64).causal_(BR),
        C("causal_tl_sq40_skv97").shape(1, 40, 97, 2, 2, 64).causal_(TL),  // keys past 39 unseen
        C("causal_br_sq40_skv97").shape(1, 40, 97, 2, 2, 64).causal_(BR),
        C("causal_br_sq97_skv40").shape(1, 97, 40, 2, 2, 64).causal_(BR).is_quick(),  // first 57 rows fully masked
        C("causal_tl_sq97_skv40").shape(1, 97, 40, 2, 2, 64).causal_(TL),
        C("causal_tl_s257_d40").shape(2, 257, 257, 2, 2, 40).causal_(TL),
        C("causal_br_s1025").shape(1, 1025, 1025, 1, 1, 64).causal_(BR),
        // ---- windows (left, right), both alignments, with causal
        C("window_16_16_tl").shape(1, 97, 97, 2, 2, 64).window(16, 16, ATL).is_quick(),
        C("window_8_0_br_cross").shape(1, 50, 97, 2, 2, 64).window(8, 0, ABR),
        C("window_0_8_tl").shape(1, 97, 97, 2, 2, 64).window(0, 8, ATL),
        C("window_left_only").shape(1, 97, 97, 2, 2, 64).window(5, -1, ATL),
        C("window_right_only_br").shape(1, 60, 97, 2, 2, 64).window(-1, 3, ABR),
        C("window_causal_tl").shape(1, 257, 257, 2, 2, 64).causal_(TL).window(32, -1, ATL),
        C("window_causal_br_cross").shape(1, 97, 200, 2, 2, 64).causal_(BR).window(20, 0, ABR),
        C("window_br_sq_gt_skv").shape(1, 80, 30, 2, 2, 64).window(4, 4, ABR),  // masked rows
        // ---- bias kinds (f32, f16, bf16 biases)
        C("bias_dense").shape(2, 33, 47, 2, 2, 64).with_bias(BiasKind::DENSE).is_quick(),
        C("bias_bcast").shape(2, 65, 65, 2, 2, 64).with_bias(BiasKind::BCAST),
        C("bias_keypad").shape(3, 40, 57, 2, 2, 64).with_bias(BiasKind::KEYPAD).is_quick(),
        C("bias_negband").shape(1, 257, 257, 2, 2, 64).with_bias(BiasKind::NEG_BAND),
        C("bias_negtri").shape(1, 257, 257, 2, 2, 64).with_bias(BiasKind::NEG_TRI),
        C("bias_rowcol").shape(2, 37, 41, 2, 1, 64).with_bias(BiasKind::NEG_ROWCOL).is_quick(),
        C("bias_dense_f16").shape(1, 50, 70, 2, 2, 64).dt(F16).with_bias(BiasKind::DENSE),
        C("bias_bcast_bf16").shape(2, 60, 60, 2, 2, 64).dt(BF16).with_bias(BiasKind::BCAST),
        C("bias_f32_on_bf16").shape(1, 60, 60, 2, 2, 64).dt(BF16).with_bias(BiasKind::DENSE).bias_dt(F32),
        // f32 inputs (the sm90 tf32 kernels on Hopper) with 16-bit biases, partial tiles at both ends
        C("bias_bf16_on_f32").shape(1, 150, 200, 2, 2, 64).with_bias(BiasKind::DENSE).bias_dt(BF16),
        C("bias_f16_on_f32_d128").shape(1, 130, 97, 2, 2, 128).with_bias(BiasKind::NEG_BAND).bias_dt(F16),
        C("bias_negtri_plus_causal").shape(1, 97, 97, 2, 2, 64).with_bias(BiasKind::NEG_TRI).causal_(TL),
        C("bias_keypad_causal_br").shape(2, 50, 70, 2, 2, 64).with_bias(BiasKind::KEYPAD).causal_(BR),
        C("bias_rowcol_window").shape(1, 97, 97, 2, 2, 64).with_bias(BiasKind::NEG_ROWCOL).window(10, 10, ATL),
        // ---- huge-negative padding masks (Hugging Face builds them with finfo(dtype).min, not
        // -inf): the fused backward recomputes P from the saved LSE, which such a row's bias
        // would swallow. Rows fully masked by a finite value attend to every key (softmax is
        // unchanged by a per-row constant); by -inf they are fully masked (o = 0).
        C("pad_fltmax").shape(2, 96, 96, 4, 4, 64).pad(BiasKind::PAD, -FLT_MAX).is_quick(),
        C("pad_1e9").shape(2, 96, 96, 4, 4, 64).pad(BiasKind::PAD, -1e9f).is_quick(),
        C("pad_1e4").shape(2, 96, 96, 4, 4, 64).pad(BiasKind::PAD, -1e4f),
        C("pad_inf").shape(2, 96, 96, 4, 4, 64).pad(BiasKind::PAD, -INFINITY).is_quick(),
        C("pad_fltmax_rand_gqa").shape(2, 160, 130, 4, 2, 64).pad(BiasKind::PAD_RAND, -FLT_MAX),
        C("pad_1e9_causal_br").shape(2, 96, 96, 2, 2, 64).pad(BiasKind::PAD, -1e9f).causal_(BR),
        C("pad_inf_rows64").shape(2, 160, 160, 2, 2, 64).pad(BiasKind::PAD, -INFINITY),  // q_valid(1) = 64
        C("pad_fltmax_rows64").shape(2, 160, 160, 2, 2, 64).pad(BiasKind::PAD, -FLT_MAX),
        C("lpad_fltmax_causal_tl").shape(2, 100, 100, 2, 2, 64).pad(BiasKind::LPAD_KEYS, -FLT_MAX).causal_(TL).is_quick(),
        C("lpad_1e4_window").shape(2, 100, 100, 2, 2, 64).pad(BiasKind::LPAD_KEYS, -1e4f).window(20, 0, ATL),
        C("pad_bf16_min").shape(2, 96, 96, 2, 2, 64).dt(BF16).pad(BiasKind::PAD, -FLT_MAX),
        C("pad_f16_min").shape(2, 96, 96, 2, 2, 64).dt(F16).pad(BiasKind::PAD, -FLT_MAX),
        C("pad_1e9_bf16_rand").shape(2, 96, 96, 2, 2, 128).dt(BF16).pad(BiasKind::PAD_RAND, -1e9f),
        C("pad_fltmax_d128_s300").shape(2, 300, 300, 2, 1, 128).pad(BiasKind::PAD, -FLT_MAX),
        C("pad_1e9_f16_causal").shape(2, 130, 130, 2, 2, 64).dt(F16).pad(BiasKind::PAD, -1e9f).causal_(BR),
        // ---- the bias gradient (dbias, want_dbias): every broadcast pattern of the bias and so
        // every reduction of dbias ([B,Hq,Sq,Skv] none; [1,Hq,..] over B; [1,1,..] over B and H;
        // [B,1,1,Skv] over H and Sq; a stride-0 expanded view over B and Sq), with causal and
        // window masks, -inf entries and padding, GQA, f32/bf16/f16 inputs and biases, varlen.
        C("dbias_dense_gqa").shape(2, 33, 47, 4, 2, 64).with_bias(BiasKind::DENSE).want_dbias().is_quick(),
        C("dbias_heads_negband_causal_tl").shape(2, 65, 65, 2, 1, 64).with_bias(BiasKind::NEG_BAND).causal_(TL).want_dbias(),
        C("dbias_shared_window_bf16").shape(2, 40, 57, 2, 2, 64).dt(BF16).with_bias(BiasKind::BCAST).window(8, 8, ABR).want_dbias().is_quick(),
        C("dbias_keyrow_f16_causal_br").shape(3, 30, 50, 4, 2, 32).dt(F16).with_bias(BiasKind::KEYROW).causal_(BR).want_dbias(),
        C("dbias_stride0_window").shape(2, 37, 41, 2, 2, 64).with_bias(BiasKind::STRIDE0).window(5, 3, ATL).want_dbias().is_quick(),
        C("dbias_keypad_causal_br").shape(3, 40, 57, 2, 2, 64).with_bias(BiasKind::KEYPAD).causal_(BR).want_dbias(),
        C("dbias_rowcol_bf16_bias").shape(2, 37, 41, 2, 1, 64).with_bias(BiasKind::NEG_ROWCOL).bias_dt(BF16).want_dbias(),
        C("dbias_pad_inf_gqa").shape(2, 96, 96, 4, 2, 64).pad(BiasKind::PAD, -INFINITY).want_dbias().is_quick(),
        C("dbias_pad_fltmax_causal").shape(2, 96, 96, 2, 2, 64).pad(BiasKind::PAD_RAND, -FLT_MAX).causal_(BR).want_dbias(),
        C("dbias_bcast_d256_bf16").shape(2, 40, 70, 2, 1, 256).dt(BF16).with_bias(BiasKind::BCAST).want_dbias(),
        C("dbias_lpad_f16_window").shape(2, 60, 60, 2, 2, 64).dt(F16).pad(BiasKind::LPAD_KEYS, -FLT_MAX).window(20, 0, ATL).want_dbias(),
        C("dbias_varlen_causal").shape(1, 0, 0, 2, 2, 64).varlen({20, 1, 13}, {25, 4, 9}).with_bias(BiasKind::DENSE).causal_(BR).want_dbias(),
        C("dbias_bhsd_f32_on_bf16").shape(2, 30, 45, 2, 2, 64).dt(BF16).with_bias(BiasKind::STRIDE0).bias_dt(F32).layout_(Layout::BHSD).want_dbias(),
        // ---- GQA / MQA at B > 1
        C("gqa_4_2_b2").shape(2, 65, 65, 4, 2, 64).is_quick(),
        C("gqa_8_2_b3_causal").shape(3, 50, 50, 8, 2, 64).causal_(BR),
        C("mqa_6_1_b2").shape(2, 41, 73, 6, 1, 64),
        C("gqa_bf16_bias").shape(2, 64, 64, 4, 1, 64).dt(BF16).with_bias(BiasKind::DENSE),
        C("gqa_rowcol_b2").shape(2, 45, 45, 4, 2, 64).with_bias(BiasKind::NEG_ROWCOL),
        // ---- varlen (B = 1 views, cu_seqlens), empty and length-1 sequences
        C("varlen_basic").shape(1, 0, 0, 2, 2, 64).varlen({17, 40, 5}, {17, 40, 5}).is_quick(),
        C("varlen_empty_len1").shape(1, 0, 0, 2, 2, 64).varlen({0, 1, 30, 0, 9}, {3, 1, 30, 0, 0}).is_quick(),
        C("varlen_cross_causal_br").shape(1, 0, 0, 2, 2, 64).varlen({10, 33, 1}, {25, 20, 7}).causal_(BR),
        C("varlen_causal_tl_gqa").shape(1, 0, 0, 4, 2, 64).varlen({20, 50, 3}, {20, 50, 3}).causal_(TL),
        C("varlen_window").shape(1, 0, 0, 2, 2, 64).varlen({60, 37}, {60, 37}).window(8, 8, ABR),
        C("varlen_bias").shape(1, 0, 0, 2, 2, 64).varlen({20, 13}, {25, 9}).with_bias(BiasKind::DENSE),
        C("varlen_bf16").shape(1, 0, 0, 2, 1, 80).dt(BF16).varlen({33, 64, 1}, {33, 64, 1}).causal_(BR),
        C("varlen_f16_keypad").shape(1, 0, 0, 2, 2, 64).dt(F16).varlen({30, 30}, {40, 40}).with_bias(BiasKind::KEYPAD),
        // ---- layouts: fused QKV strided views, transposed [B, H, S, D]
        C("fused_qkv").shape(2, 57, 57, 4, 2, 64).layout_(Layout::FUSED_QKV).is_quick(),
        C("fused_qkv_causal_bf16").shape(1, 97, 97, 4, 4, 64).dt(BF16).causal_(TL).layout_(Layout::FUSED_QKV),
        C("fused_qkv_varlen").shape(1, 0, 0, 2, 1, 64).varlen({20, 1, 31}, {20, 1, 31}).layout_(Layout::FUSED_QKV),
        C("fused_qkv_dv_ne_d").shape(1, 40, 40, 2, 2, 64).dv(32).layout_(Layout::FUSED_QKV),
        C("bhsd").shape(2, 57, 57, 2, 2, 64).layout_(Layout::BHSD).is_quick(),
        C("bhsd_cross_f16_bias").shape(2, 30, 77, 4, 2, 64).dt(F16).with_bias(BiasKind::DENSE).layout_(Layout::BHSD),
        C("bhsd_causal_br_d96").shape(1, 100, 100, 2, 2, 96).causal_(BR).layout_(Layout::BHSD),
        C("odd_kv_d128_causal").shape(2, 77, 77, 4, 2, 128).causal_(BR).layout_(Layout::ODD_KV),
        C("odd_kv_varlen_d64").shape(1, 0, 0, 2, 2, 64).varlen({33, 1, 40}, {20, 9, 41}).layout_(Layout::ODD_KV),
        // ---- algorithm pinned (the rest run both)
        C("exact_only_s257").shape(1, 257, 257, 2, 2, 64).algo_(AlgoSel::EXACT),
        C("fused_only_s257").shape(1, 257, 257, 2, 2, 64).algo_(AlgoSel::FUSED),
        C("prec_f32_explicit").shape(1, 64, 64, 2, 2, 64).prec_(FATTN_PREC_F32),
        // ---- extra (--extra): bigger, slower on the CPU
        C("extra_s2048_causal").shape(1, 2048, 2048, 2, 1, 64).causal_(BR).is_extra(),
        C("extra_b4_s512_bias_gqa").shape(4, 512, 512, 4, 2, 128).with_bias(BiasKind::NEG_BAND).is_extra(),
        C("extra_cross_1877").shape(1, 625, 1877, 2, 2, 64).dt(BF16).is_extra(),
        // ---- large (--large; CUDA): S >= 8k, and a tensor with more than 2^31 elements.
        // Judged on sampled rows and keys (the oracle's sampled layer). FUSED only where the
        // EXACT arm's [B, Hq, S, S] probabilities would not fit in device memory.
        // Full (non-causal) S8k, MHA D128 and GQA D64: the longest walks of the sm90 backward, 128
        // query tiles per 128-key tile (4 heads per GQA group) and 64-128 key tiles per dQ tile.
        C("large_s8k_bf16").shape(2, 8192, 8192, 8, 8, 128).dt(BF16).algo_(AlgoSel::FUSED).is_large(),
        C("large_s8k_gqa_f16").shape(2, 8192, 8192, 16, 4, 64).dt(F16).algo_(AlgoSel::FUSED).is_large(),
        // f32 inputs (tf32 on CUDA): the sm90 tf32 forward's longest walk, 128 key tiles of 64
        // keys at D128, through the pre-pass's rounded K and Vᵀ copies, GQA 4 heads per group.
        C("large_s8k_gqa_tf32").shape(1, 8192, 8192, 8, 2, 128).algo_(AlgoSel::FUSED).is_large(),
        // The sm90 tf32 backward in passes of kv heads (workspace.h: tf32_bwd_pass_kv_heads, with
        // FATTN_TF32_BWD_PASSES, on by default): on 132 SMs two passes of two kv heads (4 query heads) each, the
        // rounded copies of one pass in the workspace; the sampled rows fall in both passes. A
        // ±256 band, so that the sampled judge can afford keys too (dk, dv: a key's rows are few).
        C("large_tf32_head_passes").shape(8, 4096, 4096, 8, 4, 128).window(256, 256, ATL).algo_(AlgoSel::FUSED).is_large(),
        C("large_s16k_causal_bf16").shape(2, 16384, 16384, 16, 16, 128).dt(BF16).causal_(BR).algo_(AlgoSel::FUSED).is_large(),
        C("large_varlen_32k").shape(1, 0, 0, 8, 2, 64).dt(F16).varlen({20000, 1, 12767}, {20000, 1, 12767}).causal_(BR).algo_(AlgoSel::FUSED).is_large(),
        C("large_s16k_window_bias").shape(1, 16384, 16384, 2, 2, 64).dt(BF16).with_bias(BiasKind::NEG_BAND).is_large(),
        // q, o, dout, dq: (2^20 + 17)·32·64 > 2^31 elements (MQA keeps k, v small)
        C("large_2g_elems_mqa_window").shape(1, (1 << 20) + 17, (1 << 20) + 17, 32, 1, 64).dt(BF16).window(64, 0, ATL).algo_(AlgoSel::FUSED).is_large(),
    };
}

}  // namespace

const std::vector<AttnCase> &attn_cases() {
    static const std::vector<AttnCase> t = make_table();
    return t;
}

static const bool registered = register_family({"attn", run_attn_family});

}  // namespace fattn_test
