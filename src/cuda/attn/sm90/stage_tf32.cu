// stage_tf32.cu — the pre-pass of the sm90 tf32 kernels: key-side f32 operands rounded to tf32
// (cvt.rna; wgmma would truncate) into the workspace, as row copies and one transposed copy in
// the layouts of workspace.h (kr/vr/tr). The forward stages K rows and Vᵀ, the dQ kernel K rows,
// V rows and Kᵀ: tf32 wgmma reads K-major operands only, so the B operand of O += P·V and of
// dQ += dS·K must be stored keys-innermost.
#include "cuda/attn/mma.cuh"
#include "cuda/attn/sm90/stage_tf32.h"
#include "cuda/attn/workspace.h"

namespace fattn::cuda::attn {
namespace {

// One CTA per (32-key chunk, kv head, sequence). Every column of tr a tile can read holds a
// finite value: the keys of the sequence's last 8-key group past its end and the gap up to the
// next sequence's first column (up to vt_cols after the last sequence) are written as 0 by chunk
// 0, so a product multiplies zeros there (its P or dS is 0), never stale workspace. Rows of the
// row copies past a sequence are only read as logits the softmax masks to -inf (never
// multiplied): no fill.
template <int D>
__global__ void __launch_bounds__(256)
    sm90_tf32_stage_kernel(const AttnFwdParams p, const Sm90Stage sg, int64_t kr_rows, int64_t vt_cols) {
    __shared__ float tile[32][D + 1];  // +1: the transposed reads of 32 keys hit 32 banks
    const int64_t s = blockIdx.z, hk = blockIdx.y;
    const SeqRange sr = seq_range(p, s);
    const int64_t j0 = int64_t(blockIdx.x) * 32;
    const int64_t flat0 = sr.batch_index * p.total_kv + sr.kv_begin;
    float *tr = sg.tr + hk * int64_t(D) * vt_cols;
    if (j0 == 0) {  // the gap after this sequence's last group: [end, next sequence's first column)
        const int64_t end = sm90_vt_col0(flat0, s) + (sr.kv_len + 7) / 8 * 8;
        const int64_t stop = s + 1 < p.batch ? sm90_vt_col0(flat0 + sr.kv_len, s + 1) : vt_cols;
        for (int64_t e = threadIdx.x; e < (stop - end) * D; e += 256)
            tr[(e / (stop - end)) * vt_cols + end + e % (stop - end)] = 0.f;
    }
    if (j0 >= sr.kv_len) return;
    auto rounded = [](float x) { return __uint_as_float(to_tf32(x)); };
    auto src = [&](const Sm90Stage::Src &x, int64_t j, int c) {
        return x.x[sr.batch_index * x.sb + (sr.kv_begin + j) * x.ss + hk * x.sh + c];
    };
    for (int e = threadIdx.x; e < 32 * D; e += 256) {
        const int r = e / D, c = e % D;
        const int64_t j = j0 + r;
        float x = 0.f;
        if (j < sr.kv_len) {
            for (int i = 0; i < sg.nrows; ++i) sg.rows[i][(hk * kr_rows + flat0 + j) * D + c] = rounded(src(sg.row_src[i], j, c));
            x = rounded(src(sg.t_src, j, c));
        }
        tile[r][c] = x;
    }
    __syncthreads();
    const int64_t cols = (sr.kv_len + 7) / 8 * 8 - j0;  // this chunk's columns: whole 8-key groups
    float *tcols = tr + sm90_vt_col0(flat0, s) + j0;
    for (int e = threadIdx.x; e < 32 * D; e += 256) {
        const int d = e / 32, c = e % 32;
        if (c < cols) tcols[int64_t(d) * vt_cols + c] = tile[(c & ~7) + tf32_key_order(c & 7)][d];
    }
}

}  // namespace

cudaError_t sm90_tf32_stage(const AttnFwdParams &p, int d, const Sm90Stage &sg, const Workspace &w, cudaStream_t st) {
    const dim3 grid(ceil_div_u(p.seqlen_kv, 32), unsigned(p.hkv), unsigned(p.batch));
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
    if (d == 64) sm90_tf32_stage_kernel<64><<<grid, 256, 0, st>>>(p, sg, w.kr_rows, w.vt_cols);
    else sm90_tf32_stage_kernel<128><<<grid, 256, 0, st>>>(p, sg, w.kr_rows, w.vt_cols);
    return cudaGetLastError();
}

}  // namespace fattn::cuda::attn
