// stage_tf32.cu — the pre-pass of the sm90 tf32 kernels: key-side f32 operands rounded to tf32
// (cvt.rna; wgmma would truncate) into the workspace, as row copies and one transposed copy in
// the layouts of workspace.h. The forward stages K rows and Vᵀ; the backward Kᵀ (the dQ kernel),
// Qᵀ and dOᵀ (the dK/dV kernel), its kernels reading the rows in place: tf32 wgmma reads K-major operands
// only, so the B operand of O += P·V, dQ += dS·K, dV += Pᵀ·dO and dK += dSᵀ·Q must be stored with
// the contracted rows innermost.
#include "cuda/attn/launch.h"
#include "cuda/attn/mma.cuh"
#include "cuda/attn/sm90/stage_tf32.h"
#include "cuda/attn/workspace.h"

namespace fattn::cuda::attn {
namespace {

// One CTA per (32-row chunk, head, sequence) of one side; D is the copies' width (the kernels'
// bucket), p.d <= D the tensors' head dim (a multiple of 4: select.cpp): columns p.d .. D-1 of a
// row copy and rows p.d .. D-1 of a transposed one are written as 0. Every column of a transposed copy a
// tile can read holds a finite value: the rows of the sequence's last 8-row group past its end
// and the gap up to the next sequence's first column (up to cols after the last sequence) are
// written as 0 by chunk 0, so a product multiplies zeros there (its P or dS is 0), never stale
// workspace. Rows of the row copies past a sequence are only read as logits the softmax masks to
// -inf, or by the dK/dV kernel as rows it masks (never multiplied into a kept sum): no fill.
template <int D>
__global__ void __launch_bounds__(256)
    sm90_tf32_stage_kernel(const AttnFwdParams p, const Sm90Stage sg, int64_t nrows_flat, int64_t cols) {
    FATTN_DYN_SMEM_F32(smem_f32);  // tile[2][32][D + 1]: +1, the transposed reads of 32 rows hit 32 banks
    float(*tile)[32][D + 1] = reinterpret_cast<float(*)[32][D + 1]>(smem_f32);
    const int64_t s = blockIdx.z, hh = blockIdx.y;
    const SeqRange sr = seq_range(p, s);
    const int64_t begin = sg.queries ? sr.q_begin : sr.kv_begin, len = sg.queries ? sr.q_len : sr.kv_len;
    const int64_t total = sg.queries ? p.total_q : p.total_kv;
    const int64_t j0 = int64_t(blockIdx.x) * 32;
    const int64_t flat0 = sr.batch_index * total + begin;
    if (j0 == 0) {  // the gap after this sequence's last group: [end, next sequence's first column)
        const int64_t end = sm90_vt_col0(flat0, s) + (len + 7) / 8 * 8;
        const int64_t stop = s + 1 < p.batch ? sm90_vt_col0(flat0 + len, s + 1) : cols;
        for (int i = 0; i < sg.ntr; ++i) {
            float *tr = sg.tr[i] + hh * int64_t(D) * cols;
            for (int64_t e = threadIdx.x; e < (stop - end) * D; e += 256)
                tr[(e / (stop - end)) * cols + end + e % (stop - end)] = 0.f;
        }
    }
    if (j0 >= len) return;
    // A transposed source that is also a row source is read once (the query side's q and dout,
    // the backward's k): its rounded values go to the row copy and to the tile together.
    int t_of_row[2] = {-1, -1};
    for (int t = 0; t < sg.ntr; ++t)
        for (int i = 0; i < sg.nrows; ++i)
            if (sg.t_src[t].x == sg.row_src[i].x && sg.t_src[t].sb == sg.row_src[i].sb &&
                sg.t_src[t].ss == sg.row_src[i].ss && sg.t_src[t].sh == sg.row_src[i].sh)
                t_of_row[i] = t;
    // 16-byte loads where every source allows them (block-uniform); the copies' regions are 16-byte
    // aligned (TMA reads them) and their rows multiples of 4 floats.
    auto a16 = [](const Sm90Stage::Src &x) {
        return (reinterpret_cast<uintptr_t>(x.x) & 15) == 0 && x.sb % 4 == 0 && x.ss % 4 == 0 && x.sh % 4 == 0;
    };
    bool vec = true;
    for (int i = 0; i < sg.nrows; ++i) vec = vec && a16(sg.row_src[i]);
    for (int t = 0; t < sg.ntr; ++t) vec = vec && a16(sg.t_src[t]);
    auto at = [&](const Sm90Stage::Src &x, int64_t j) { return x.x + sr.batch_index * x.sb + (begin + j) * x.ss + hh * x.sh; };
    auto put = [&](int t, int r, int c, float4 v) {
        tile[t][r][c] = v.x, tile[t][r][c + 1] = v.y, tile[t][r][c + 2] = v.z, tile[t][r][c + 3] = v.w;
    };
    auto round4 = [](float4 v) {
        return make_float4(__uint_as_float(to_tf32(v.x)), __uint_as_float(to_tf32(v.y)), __uint_as_float(to_tf32(v.z)),
                           __uint_as_float(to_tf32(v.w)));
    };
    constexpr int Q4 = D / 4;
    const int dd = int(p.d);
    for (int e = threadIdx.x; e < 32 * Q4; e += 256) {  // 4 columns c..c+3 of chunk row r
        const int r = e / Q4, c = 4 * (e % Q4);
        const int64_t j = j0 + r;
        const bool in = j < len;
        auto load = [&](const Sm90Stage::Src &x) {
            if (!in || c >= dd) return make_float4(0.f, 0.f, 0.f, 0.f);
            const float *q = at(x, j) + c;
            return round4(vec ? *reinterpret_cast<const float4 *>(q) : make_float4(q[0], q[1], q[2], q[3]));
        };
        for (int i = 0; i < sg.nrows; ++i) {
            const float4 v = load(sg.row_src[i]);
            if (in) *reinterpret_cast<float4 *>(sg.rows[i] + (hh * nrows_flat + flat0 + j) * D + c) = v;
            if (t_of_row[i] >= 0) put(t_of_row[i], r, c, v);
        }
        for (int t = 0; t < sg.ntr; ++t)
            if (t_of_row[0] != t && t_of_row[1] != t) put(t, r, c, load(sg.t_src[t]));
    }
    __syncthreads();
    // Transposed: per d, this chunk's columns (whole 8-row groups), 4 per thread.
    const int64_t ncol = (len + 7) / 8 * 8 - j0;
    for (int t = 0; t < sg.ntr; ++t) {
        float *tcols = sg.tr[t] + hh * int64_t(D) * cols + sm90_vt_col0(flat0, s) + j0;
        for (int e = threadIdx.x; e < 8 * D; e += 256) {
            const int d = e / 8, c = 4 * (e % 8);
            if (c >= ncol) continue;
            float4 v;
            v.x = tile[t][(c & ~7) + tf32_key_order(c & 7)][d];
            v.y = tile[t][(c & ~7) + tf32_key_order((c + 1) & 7)][d];
            v.z = tile[t][(c & ~7) + tf32_key_order((c + 2) & 7)][d];
            v.w = tile[t][(c & ~7) + tf32_key_order((c + 3) & 7)][d];
            *reinterpret_cast<float4 *>(tcols + int64_t(d) * cols + c) = v;  // cols, col0 and c: multiples of 4
        }
    }
}

}  // namespace

cudaError_t sm90_tf32_stage(const AttnFwdParams &p, int d, const Sm90Stage &sg, int64_t rows, int64_t cols,
                            cudaStream_t st) {
    const dim3 grid(ceil_div_u(sg.queries ? p.seqlen_q : p.seqlen_kv, 32), unsigned(sg.heads), unsigned(p.batch));
    auto smem = [](int dd) { return size_t(2 * 32 * (dd + 1)) * sizeof(float); };
    return d == 64 ? launch_kernel(sm90_tf32_stage_kernel<64>, grid, 256, smem(64), st, p, sg, rows, cols)
                   : launch_kernel(sm90_tf32_stage_kernel<128>, grid, 256, smem(128), st, p, sg, rows, cols);
}

}  // namespace fattn::cuda::attn
