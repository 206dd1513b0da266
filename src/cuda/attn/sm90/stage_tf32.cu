// stage_tf32.cu — the pre-pass of the sm90 tf32 kernels: key-side f32 operands rounded to tf32
// (cvt.rna; wgmma would truncate) into the workspace, as row copies and one transposed copy in
// the layouts of workspace.h. The forward stages K rows and Vᵀ; the backward K and V rows and Kᵀ
// (the dQ kernel), Q and dO rows and Qᵀ, dOᵀ (the dK/dV kernel): tf32 wgmma reads K-major operands
// only, so the B operand of O += P·V, dQ += dS·K, dV += Pᵀ·dO and dK += dSᵀ·Q must be stored with
// the contracted rows innermost.
#include "cuda/attn/mma.cuh"
#include "cuda/attn/sm90/stage_tf32.h"
#include "cuda/attn/workspace.h"

namespace fattn::cuda::attn {
namespace {

// One CTA per (32-row chunk, head, sequence) of one side. Every column of a transposed copy a
// tile can read holds a finite value: the rows of the sequence's last 8-row group past its end
// and the gap up to the next sequence's first column (up to cols after the last sequence) are
// written as 0 by chunk 0, so a product multiplies zeros there (its P or dS is 0), never stale
// workspace. Rows of the row copies past a sequence are only read as logits the softmax masks to
// -inf, or by the dK/dV kernel as rows it masks (never multiplied into a kept sum): no fill.
template <int D>
__global__ void __launch_bounds__(256)
    sm90_tf32_stage_kernel(const AttnFwdParams p, const Sm90Stage sg, int64_t nrows_flat, int64_t cols) {
    __shared__ float tile[2][32][D + 1];  // +1: the transposed reads of 32 rows hit 32 banks
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
    auto rounded = [](float x) { return __uint_as_float(to_tf32(x)); };
    auto src = [&](const Sm90Stage::Src &x, int64_t j, int c) {
        return x.x[sr.batch_index * x.sb + (begin + j) * x.ss + hh * x.sh + c];
    };
    for (int e = threadIdx.x; e < 32 * D; e += 256) {
        const int r = e / D, c = e % D;
        const int64_t j = j0 + r;
        const bool in = j < len;
        for (int i = 0; i < sg.nrows; ++i)
            if (in) sg.rows[i][(hh * nrows_flat + flat0 + j) * D + c] = rounded(src(sg.row_src[i], j, c));
        for (int i = 0; i < sg.ntr; ++i) tile[i][r][c] = in ? rounded(src(sg.t_src[i], j, c)) : 0.f;
    }
    __syncthreads();
    const int64_t ncol = (len + 7) / 8 * 8 - j0;  // this chunk's columns: whole 8-row groups
    for (int i = 0; i < sg.ntr; ++i) {
        float *tcols = sg.tr[i] + hh * int64_t(D) * cols + sm90_vt_col0(flat0, s) + j0;
        for (int e = threadIdx.x; e < 32 * D; e += 256) {
            const int d = e / 32, c = e % 32;
            if (c < ncol) tcols[int64_t(d) * cols + c] = tile[i][(c & ~7) + tf32_key_order(c & 7)][d];
        }
    }
}

}  // namespace

cudaError_t sm90_tf32_stage(const AttnFwdParams &p, int d, const Sm90Stage &sg, int64_t rows, int64_t cols,
                            cudaStream_t st) {
    const dim3 grid(ceil_div_u(sg.queries ? p.seqlen_q : p.seqlen_kv, 32), unsigned(sg.queries ? p.hq : p.hkv),
                    unsigned(p.batch));
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
    if (d == 64) sm90_tf32_stage_kernel<64><<<grid, 256, 0, st>>>(p, sg, rows, cols);
    else sm90_tf32_stage_kernel<128><<<grid, 256, 0, st>>>(p, sg, rows, cols);
    return cudaGetLastError();
}

}  // namespace fattn::cuda::attn
