// exact.cpp — the materialized ("exact") softmax-attention arm on CUDA: cuBLAS strided-batched
// GEMMs around the row kernels of exact_kernels.cu. This is the `--attn exact` arm trainers A/B
// the fused kernels against; it keeps P [B, Hq, Sq, Skv] (f32) in `saved` between fwd and bwd.
//
// Per sequence s (dense: batch index s; varlen: see below) and per member r of a GQA group
// (query heads h = hk·G + r), one GEMM call batched over the Hkv kv heads does, for every h:
//   fwd: S_h = scale·Q_h·K_hkᵀ -> saved (f32); softmax in place (+bias, masks, lse);
//        O_h = P_h·V_hk
//   bwd: δ = rowsum(dO∘O); dV_hk += P_hᵀ·dO_h; dP_h = dO_h·V_hkᵀ; dS = P∘(dP − δ);
//        dQ_h = scale·dS_h·K_hk; dK_hk += scale·dS_hᵀ·Q_h; with dbias, dbias += dS (f32) summed
//        over the bias's broadcast dims, heads then rows, sequence after sequence
// The views are [B, S, H, D] with element strides: a head's rows are a matrix with leading
// dimension = token stride, so cuBLAS reads q/k/v/o/dout in place (no copies). cuBLAS is
// column-major: a row-major [rows, cols] matrix with row stride ld is its col-major transpose.
//
// GQA: dK/dV of a kv head are summed over r = 0..G-1 in that order, by chaining GEMMs with
// beta = 1 into an f32 accumulator in the workspace (then one store to the strided output):
// a fixed reduction order, no atomics. cuBLAS GEMMs are bitwise reproducible for a fixed
// configuration on one stream with the default (atomics-free) mode, so the arm is deterministic.
//
// Precision: f32 inputs: TF32 -> CUBLAS_COMPUTE_32F_FAST_TF32, F32 -> CUBLAS_COMPUTE_32F (no
// tensor cores). f16/bf16 inputs (NATIVE): GEMMs in the input dtype with f32 compute; P and dS
// are rounded to the input dtype only as GEMM operands (P kept in f32 for the backward).
//
// Varlen: the per-sequence lengths are needed on the host to size the GEMMs, so the arm copies
// cu_seqlens to the host and synchronizes the stream once per call (documented host sync; the
// exact arm is a reference/A-B arm, not a graph-capturable hot path). Each sequence's P sits in
// its own max_seqlen_q × max_seqlen_kv slot per head, packed with leading dimension len_kv.
#include "cuda/exact/exact.h"

#include <cublas_v2.h>  // types only: the functions come from cublas_api (dlopen)
#include <cuda_runtime.h>

#include <climits>
#include <vector>

#include "cuda/device_guard.h"
#include "cuda/exact/cublas_api.h"
#include "cuda/exact/exact_kernels.h"

namespace fattn::cuda::exact {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

size_t esize(fattn_dtype t) { return t == FATTN_F32 ? 4 : 2; }

cudaDataType_t cuda_type(fattn_dtype t) {
    return t == FATTN_F16 ? CUDA_R_16F : t == FATTN_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// One cuBLAS handle per (thread, device), created on first use and kept for the process: handle
// creation costs milliseconds and allocates, far too much per call. Never destroyed on purpose
// (destroying after the CUDA runtime shut down at exit would be worse than the leak).
cublasHandle_t handle_for(const CublasApi &api, int device, std::string *err) {
    thread_local std::vector<cublasHandle_t> handles;
    if (device < 0) device = 0;
    if (size_t(device) >= handles.size()) handles.resize(size_t(device) + 1, nullptr);
    if (!handles[size_t(device)]) {
        cublasHandle_t h = nullptr;
        cublasStatus_t s = api.create(&h);
        if (s != CUBLAS_STATUS_SUCCESS) {
            if (err) *err = std::string("exact: cublasCreate failed: ") + api.status_string(s);
            return nullptr;
        }
        // Default math: tensor cores only where the compute type asks for them (we pass it per
        // GEMM), so F32 stays strict fp32 and TF32 is explicit.
        api.set_math_mode(h, CUBLAS_DEFAULT_MATH);
        api.set_pointer_mode(h, CUBLAS_POINTER_MODE_HOST);
        handles[size_t(device)] = h;
    }
    return handles[size_t(device)];
}

// One batched GEMM, column-major: C[m,n] (ldc, strideC) = alpha·op(A)[m,k]·op(B)[k,n] + beta·C.
struct GemmOp {
    cublasOperation_t ta, tb;
    int64_t m, n, k;
    const void *a; cudaDataType_t at; int64_t lda, sa;
    const void *b; cudaDataType_t bt; int64_t ldb, sb;
    void *c;       cudaDataType_t ct; int64_t ldc, sc;
    float alpha, beta;
    int64_t batch;
};

cublasComputeType_t compute_type(const AttnFwdParams &p) {
    if (p.dtype == FATTN_F32 && p.prec == FATTN_PREC_TF32) return CUBLAS_COMPUTE_32F_FAST_TF32;
    return CUBLAS_COMPUTE_32F;
}

struct Runner {
    const CublasApi *api = nullptr;
    cublasHandle_t h = nullptr;
    cudaStream_t st = nullptr;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    std::string *err = nullptr;

    // The device's cuBLAS handle bound to the call's stream, the GEMM compute type of p's precision.
    fattn_status open(const AttnFwdParams &p, int device, std::string *e) {
        err = e;
        api = cublas_api(err);
        if (!api) return FATTN_ERR_BACKEND_UNAVAILABLE;  // select() said so already
        h = handle_for(*api, device, err);
        if (!h) return FATTN_ERR_DEVICE;
        st = static_cast<cudaStream_t>(p.stream);
        compute = compute_type(p);
        if (api->set_stream(h, st) != CUBLAS_STATUS_SUCCESS) {
            if (err) *err = "exact: cublasSetStream failed";
            return FATTN_ERR_DEVICE;
        }
        return FATTN_OK;
    }
    fattn_status gemm(const GemmOp &g, const char *what) {
        if (g.m == 0 || g.n == 0 || g.batch == 0) return FATTN_OK;
        cublasStatus_t s = api->gemm_strided_batched_ex(
            h, g.ta, g.tb, int(g.m), int(g.n), int(g.k), &g.alpha, g.a, g.at, int(g.lda), g.sa, g.b,
            g.bt, int(g.ldb), g.sb, &g.beta, g.c, g.ct, int(g.ldc), g.sc, int(g.batch), compute,
            CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS) {
            if (err) *err = std::string("exact: cuBLAS GEMM (") + what + ") failed: " +
                            api->status_string(s);
            return FATTN_ERR_DEVICE;
        }
        return FATTN_OK;
    }
    fattn_status launched(cudaError_t e, const char *what) {
        if (e != cudaSuccess) {
            if (err) *err = std::string("exact: kernel ") + what + ": " + cudaGetErrorString(e);
            return FATTN_ERR_DEVICE;
        }
        return FATTN_OK;
    }
};

#define EXACT_TRY(expr)                  \
    do {                                 \
        fattn_status s_ = (expr);        \
        if (s_ != FATTN_OK) return s_;   \
    } while (0)

// Workspace regions of one call (sized for the longest sequence, reused sequence by sequence).
struct Layout {
    size_t low = 0;     // [hq, sq, skv] P or dS in the input dtype (f16/bf16 only)
    size_t dp = 0;      // bwd: [hq, sq, skv] f32 dP, then dS (f32 inputs)
    size_t delta = 0;   // bwd: [hq, sq] f32
    size_t dk = 0;      // bwd: [hkv, skv, d] f32 accumulator
    size_t dv = 0;      // bwd: [hkv, skv, dv] f32 accumulator
    size_t off_low = 0, off_dp = 0, off_delta = 0, off_dk = 0, off_dv = 0, total = 0;
};

Layout layout(const AttnFwdParams &p, fattn_dir dir) {
    Layout L;
    const size_t rows = size_t(p.hq) * size_t(p.seqlen_q);
    const size_t cells = rows * size_t(p.seqlen_kv);
    if (p.dtype != FATTN_F32) L.low = cells * esize(p.dtype);
    if (dir == FATTN_DIR_BWD) {
        L.dp = cells * 4;
        L.delta = rows * 4;
        L.dk = size_t(p.hkv) * size_t(p.seqlen_kv) * size_t(p.d) * 4;
        L.dv = size_t(p.hkv) * size_t(p.seqlen_kv) * size_t(p.dim_v) * 4;
    }
    size_t o = 0;
    L.off_low = o;   o += align_up(L.low);
    L.off_dp = o;    o += align_up(L.dp);
    L.off_delta = o; o += align_up(L.delta);
    L.off_dk = o;    o += align_up(L.dk);
    L.off_dv = o;    o += align_up(L.dv);
    L.total = o;
    return L;
}

// The sequences of a call, on the host (varlen: one stream sync to read cu_seqlens).
fattn_status host_seqs(const AttnFwdParams &p, std::vector<SeqRange> *out, std::string *err) {
    out->clear();
    if (!p.cu_seqlens_q) {
        for (int64_t s = 0; s < p.batch; ++s) out->push_back(seq_range(p, s));
        return FATTN_OK;
    }
    std::vector<int32_t> cq(size_t(p.batch) + 1), ck(size_t(p.batch) + 1);
    cudaStream_t st = static_cast<cudaStream_t>(p.stream);
    cudaError_t e = cudaMemcpyAsync(cq.data(), p.cu_seqlens_q, cq.size() * 4, cudaMemcpyDefault, st);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(ck.data(), p.cu_seqlens_kv, ck.size() * 4, cudaMemcpyDefault, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) {
        if (err) *err = std::string("exact: reading cu_seqlens: ") + cudaGetErrorString(e);
        return FATTN_ERR_DEVICE;
    }
    AttnFwdParams hp = p;
    hp.cu_seqlens_q = cq.data();
    hp.cu_seqlens_kv = ck.data();
    for (int64_t s = 0; s < p.batch; ++s) {
        SeqRange r = seq_range(hp, s);
        if (r.q_len < 0 || r.kv_len < 0 || r.q_len > p.seqlen_q || r.kv_len > p.seqlen_kv ||
            r.q_begin + r.q_len > p.total_q || r.kv_begin + r.kv_len > p.total_kv) {
            if (err)
                *err = "exact: sequence " + std::to_string(s) + " has lengths (" +
                       std::to_string(r.q_len) + ", " + std::to_string(r.kv_len) +
                       ") outside max_seqlen (" + std::to_string(p.seqlen_q) + ", " +
                       std::to_string(p.seqlen_kv) + ") or the packed totals";
            return FATTN_ERR_BAD_SEQLENS;
        }
        out->push_back(r);
    }
    return FATTN_OK;
}

// A run's start (after its DeviceGuard): the cuBLAS runner on the call's stream, then the
// sequences on the host.
fattn_status begin_run(const AttnFwdParams &p, int device, Runner *R, std::vector<SeqRange> *seqs,
                       std::string *err) {
    EXACT_TRY(R->open(p, device, err));
    return host_seqs(p, seqs, err);
}

bool fits_int(int64_t x) { return x >= 0 && x <= INT_MAX; }

// cuBLAS takes int dims and leading dimensions, and needs ld >= rows of the col-major matrix.
bool ld_ok(int64_t ld, int64_t dim) { return fits_int(ld) && ld >= dim && ld >= 1; }

const char *elem(const void *base, int64_t off, fattn_dtype t) {
    return static_cast<const char *>(base) + off * int64_t(esize(t));
}
char *elem(void *base, int64_t off, fattn_dtype t) {
    return static_cast<char *>(base) + off * int64_t(esize(t));
}

}  // namespace

fattn_status select(const AttnFwdParams &p, const DeviceInfo &dev, std::string *why) {
    auto no = [&](const std::string &m) {
        if (why) *why = "exact (cuBLAS): " + m;
        return FATTN_ERR_UNSUPPORTED;
    };
    if (p.dtype == FATTN_F32) {
        if (p.prec != FATTN_PREC_F32 && p.prec != FATTN_PREC_TF32)
            return no("f32 inputs run at prec F32 or TF32, not " + std::string(fattn_prec_name(p.prec)));
        if (p.prec == FATTN_PREC_TF32 && dev.sm_major < 8) return no("TF32 needs sm_80 or newer");
    } else {
        if (p.prec != FATTN_PREC_NATIVE)
            return no(std::string(fattn_dtype_name(p.dtype)) + " inputs run only at prec NATIVE");
        if (p.dtype == FATTN_BF16 && dev.sm_major < 8) return no("bf16 GEMMs need sm_80 or newer");
    }
    if (!fits_int(p.seqlen_q) || !fits_int(p.seqlen_kv) || !fits_int(p.d) || !fits_int(p.dim_v) ||
        !fits_int(p.hq) || !fits_int(p.hkv))
        return no("a dimension exceeds the 32-bit range of cuBLAS");
    // Leading dimension = token stride; cuBLAS needs it >= the head dim (so no stride-0 S dim).
    if (!ld_ok(p.q_ss, p.d)) return no("q token stride " + std::to_string(p.q_ss) + " < head dim (cuBLAS lda)");
    if (!ld_ok(p.k_ss, p.d)) return no("k token stride " + std::to_string(p.k_ss) + " < head dim (cuBLAS lda)");
    if (!ld_ok(p.v_ss, p.dim_v)) return no("v token stride " + std::to_string(p.v_ss) + " < head dim (cuBLAS lda)");
    // The probabilities [B, Hq, Sq, Skv] f32 must have a byte count that fits (else size_t wraps
    // and the saved buffer would be reported as 0 bytes).
    const long double p_bytes = (long double)p.batch * p.hq * p.seqlen_q * p.seqlen_kv * sizeof(float);
    if (p_bytes > (long double)(INT64_MAX / 2))
        return no("the probabilities [B, Hq, Sq, Skv] would take " + std::to_string(double(p_bytes)) +
                  " bytes; use FUSED");
    // cuBLAS is opened on first use (cublas_api.h): a library that cannot be loaded makes the
    // arm unsupported here, so supports() and the call agree.
    std::string load_err;
    if (!cublas_api(&load_err)) return no(load_err);
    // o (and dout/dq in the backward) are not part of a support query: checked when run.
    return FATTN_OK;
}

size_t workspace_size(const AttnFwdParams &p, const DeviceInfo &, fattn_dir dir) {
    return layout(p, dir).total;
}

size_t saved_size(const AttnFwdParams &p, const DeviceInfo &) {
    return size_t(p.batch) * size_t(p.hq) * size_t(p.seqlen_q) * size_t(p.seqlen_kv) * sizeof(float);
}

fattn_status fwd(const AttnFwdParams &p, const DeviceInfo &dev, void *saved, void *workspace,
                 std::string *err) {
    EXACT_TRY(select(p, dev, err));
    if (!ld_ok(p.o_ss, p.dim_v)) {
        if (err) *err = "exact (cuBLAS): o token stride " + std::to_string(p.o_ss) +
                        " < head dim (cuBLAS leading dimension)";
        return FATTN_ERR_UNSUPPORTED;
    }
    DeviceGuard guard(dev.device);
    Runner R;
    std::vector<SeqRange> seqs;
    EXACT_TRY(begin_run(p, dev.device, &R, &seqs, err));

    const Layout L = layout(p, FATTN_DIR_FWD);
    const bool low = p.dtype != FATTN_F32;
    void *p_low = low ? static_cast<char *>(workspace) + L.off_low : nullptr;
    const cudaDataType_t io = cuda_type(p.dtype);
    const int64_t G = p.group();
    const size_t slot = size_t(p.hq) * size_t(p.seqlen_q) * size_t(p.seqlen_kv);

    for (size_t s = 0; s < seqs.size(); ++s) {
        const SeqRange &r = seqs[s];
        const int64_t lq = r.q_len, lk = r.kv_len;
        if (lq == 0) continue;
        const int64_t q0 = r.batch_index * p.q_sb + r.q_begin * p.q_ss;
        const int64_t k0 = r.batch_index * p.k_sb + r.kv_begin * p.k_ss;
        const int64_t v0 = r.batch_index * p.v_sb + r.kv_begin * p.v_ss;
        const int64_t o0 = r.batch_index * p.o_sb + r.q_begin * p.o_ss;
        float *lse = p.lse + r.batch_index * p.lse_sb + r.q_begin;
        if (lk == 0) {  // no keys: every row fully masked
            EXACT_TRY(R.launched(launch_zero_rows(elem(p.o, o0, p.dtype), p.dtype, p.hq, lq, p.dim_v,
                                                  p.o_ss, p.o_sh, lse, p.lse_sh, R.st),
                                 "zero_rows"));
            continue;
        }
        float *P = static_cast<float *>(saved) + s * slot;  // [hq, lq, lk]
        const int64_t head_cells = lq * lk;
        for (int64_t g = 0; g < G; ++g) {
            // S_h = scale·Q_h·K_hkᵀ  (col-major: Sᵀ[lk, lq] = op_T(K)[lk, d]·Qᵀ[d, lq])
            GemmOp op{CUBLAS_OP_T, CUBLAS_OP_N, lk, lq, p.d,
                      elem(p.k, k0, p.dtype), io, p.k_ss, p.k_sh,
                      elem(p.q, q0 + g * p.q_sh, p.dtype), io, p.q_ss, G * p.q_sh,
                      P + g * head_cells, CUDA_R_32F, lk, G * head_cells,
                      p.scale, 0.f, p.hkv};
            EXACT_TRY(R.gemm(op, "S = Q·Kᵀ"));
        }
        SoftmaxArgs sa{};
        sa.p = P;
        sa.p_low = p_low;
        sa.low_dtype = low ? p.dtype : FATTN_F32;
        sa.lse = lse;
        sa.lse_sh = p.lse_sh;
        if (p.bias) {
            const int64_t b0 = r.batch_index * p.bias_sb + r.q_begin * p.bias_si + r.kv_begin;
            sa.bias = static_cast<const char *>(p.bias) + b0 * int64_t(esize(p.bias_dtype));
            sa.bias_dtype = p.bias_dtype;
            sa.bias_sh = p.bias_sh;
            sa.bias_si = p.bias_si;
        }
        sa.hq = p.hq;
        sa.lq = lq;
        sa.lk = lk;
        sa.mask = p;
        EXACT_TRY(R.launched(launch_softmax(sa, R.st), "softmax"));
        const void *Pin = low ? p_low : static_cast<const void *>(P);
        const cudaDataType_t pt = low ? io : CUDA_R_32F;
        for (int64_t g = 0; g < G; ++g) {
            // O_h = P_h·V_hk  (col-major: Oᵀ[dv, lq] = Vᵀ[dv, lk]·Pᵀ[lk, lq])
            GemmOp op{CUBLAS_OP_N, CUBLAS_OP_N, p.dim_v, lq, lk,
                      elem(p.v, v0, p.dtype), io, p.v_ss, p.v_sh,
                      static_cast<const char *>(Pin) + g * head_cells * int64_t(esize(low ? p.dtype : FATTN_F32)),
                      pt, lk, G * head_cells,
                      elem(p.o, o0 + g * p.o_sh, p.dtype), io, p.o_ss, G * p.o_sh,
                      1.f, 0.f, p.hkv};
            EXACT_TRY(R.gemm(op, "O = P·V"));
        }
    }
    return FATTN_OK;
}

fattn_status bwd(const AttnBwdParams &p, const DeviceInfo &dev, const void *saved, void *workspace,
                 std::string *err) {
    EXACT_TRY(select(p, dev, err));
    const int64_t Dv = p.dim_v;
    auto no = [&](const char *name, int64_t ld, int64_t dim) {
        if (!ld_ok(ld, dim)) {
            if (err) *err = std::string("exact (cuBLAS): ") + name + " token stride " +
                            std::to_string(ld) + " < head dim (cuBLAS leading dimension)";
            return true;
        }
        return false;
    };
    if (no("dout", p.do_ss, Dv) || no("dq", p.dq_ss, p.d)) return FATTN_ERR_UNSUPPORTED;
    DeviceGuard guard(dev.device);
    Runner R;
    std::vector<SeqRange> seqs;
    EXACT_TRY(begin_run(p, dev.device, &R, &seqs, err));

    const Layout L = layout(p, FATTN_DIR_BWD);
    char *ws = static_cast<char *>(workspace);
    const bool low = p.dtype != FATTN_F32;
    void *buf_low = low ? ws + L.off_low : nullptr;
    float *dP = reinterpret_cast<float *>(ws + L.off_dp);
    float *delta = reinterpret_cast<float *>(ws + L.off_delta);
    float *dKacc = reinterpret_cast<float *>(ws + L.off_dk);
    float *dVacc = reinterpret_cast<float *>(ws + L.off_dv);
    const cudaDataType_t io = cuda_type(p.dtype);
    const cudaDataType_t opt = low ? io : CUDA_R_32F;  // P / dS operand type
    const int64_t opsz = int64_t(esize(low ? p.dtype : FATTN_F32));
    const int64_t G = p.group();
    const size_t slot = size_t(p.hq) * size_t(p.seqlen_q) * size_t(p.seqlen_kv);
    // dbias (the bias's shape reduced over its broadcast dims): zeroed, then each sequence's dS
    // added in sequence order (entries outside every sequence, masked or at a -inf bias stay 0)
    if (p.dbias) {
        const int64_t nb = p.dbias_sb && !p.cu_seqlens_q ? p.batch : 1, nh = p.dbias_sh ? p.hq : 1;
        const int64_t ni = p.dbias_si ? p.total_q : 1;
        EXACT_TRY(R.launched(launch_zero_4d(p.dbias, nb, nh, ni, p.total_kv, p.dbias_sb, p.dbias_sh, p.dbias_si, R.st),
                             "zero dbias"));
    }

    for (size_t s = 0; s < seqs.size(); ++s) {
        const SeqRange &r = seqs[s];
        const int64_t lq = r.q_len, lk = r.kv_len;
        const int64_t q0 = r.batch_index * p.q_sb + r.q_begin * p.q_ss;
        const int64_t k0 = r.batch_index * p.k_sb + r.kv_begin * p.k_ss;
        const int64_t v0 = r.batch_index * p.v_sb + r.kv_begin * p.v_ss;
        const int64_t o0 = r.batch_index * p.o_sb + r.q_begin * p.o_ss;
        const int64_t do0 = r.batch_index * p.do_sb + r.q_begin * p.do_ss;
        const int64_t dq0 = r.batch_index * p.dq_sb + r.q_begin * p.dq_ss;
        const int64_t dk0 = r.batch_index * p.dk_sb + r.kv_begin * p.dk_ss;
        const int64_t dv0 = r.batch_index * p.dv_sb + r.kv_begin * p.dv_ss;
        if (lk == 0) {  // no keys: dq = 0 (there is no dk/dv row)
            EXACT_TRY(R.launched(launch_zero_rows(elem(p.dq, dq0, p.dtype), p.dtype, p.hq, lq, p.d,
                                                  p.dq_ss, p.dq_sh, nullptr, 0, R.st),
                                 "zero_rows"));
            continue;
        }
        if (lq == 0) {  // no queries: dk = dv = 0
            EXACT_TRY(R.launched(launch_zero_rows(elem(p.dk, dk0, p.dtype), p.dtype, p.hkv, lk, p.d,
                                                  p.dk_ss, p.dk_sh, nullptr, 0, R.st),
                                 "zero_rows"));
            EXACT_TRY(R.launched(launch_zero_rows(elem(p.dv, dv0, p.dtype), p.dtype, p.hkv, lk,
                                                  Dv, p.dv_ss, p.dv_sh, nullptr, 0, R.st),
                                 "zero_rows"));
            continue;
        }
        const float *P = static_cast<const float *>(saved) + s * slot;  // [hq, lq, lk]
        const int64_t head_cells = lq * lk;

        DeltaArgs da{elem(p.o, o0, p.dtype), elem(p.dout, do0, p.dtype), p.dtype,
                     p.o_ss, p.o_sh, p.do_ss, p.do_sh, p.hq, lq, Dv, delta};
        EXACT_TRY(R.launched(launch_delta(da, R.st), "delta"));
        if (low) EXACT_TRY(R.launched(launch_to_low(P, buf_low, p.dtype, p.hq * head_cells, R.st), "to_low"));
        const char *Pop = low ? static_cast<const char *>(buf_low) : reinterpret_cast<const char *>(P);

        for (int64_t g = 0; g < G; ++g) {
            // dV_hk (+)= P_hᵀ·dO_h  (col-major: dVᵀ[dv, lk] = dOᵀ[dv, lq]·op_T(P)[lq, lk])
            GemmOp dv{CUBLAS_OP_N, CUBLAS_OP_T, Dv, lk, lq,
                      elem(p.dout, do0 + g * p.do_sh, p.dtype), io, p.do_ss, G * p.do_sh,
                      Pop + g * head_cells * opsz, opt, lk, G * head_cells,
                      dVacc, CUDA_R_32F, Dv, lk * Dv,
                      1.f, g == 0 ? 0.f : 1.f, p.hkv};
            EXACT_TRY(R.gemm(dv, "dV = Pᵀ·dO"));
            // dP_h = dO_h·V_hkᵀ  (col-major: dPᵀ[lk, lq] = op_T(V)[lk, dv]·dOᵀ[dv, lq])
            GemmOp dp{CUBLAS_OP_T, CUBLAS_OP_N, lk, lq, Dv,
                      elem(p.v, v0, p.dtype), io, p.v_ss, p.v_sh,
                      elem(p.dout, do0 + g * p.do_sh, p.dtype), io, p.do_ss, G * p.do_sh,
                      dP + g * head_cells, CUDA_R_32F, lk, G * head_cells,
                      1.f, 0.f, p.hkv};
            EXACT_TRY(R.gemm(dp, "dP = dO·Vᵀ"));
        }
        // dS = P∘(dP − δ): over dP (f32) or into the low buffer (P's low copy is no longer needed).
        DsArgs ds{P, dP, buf_low, low ? p.dtype : FATTN_F32, delta, p.hq * lq, lk, p.dbias != nullptr};
        EXACT_TRY(R.launched(launch_ds(ds, R.st), "dS"));
        if (p.dbias) {  // from the f32 dS (over dP)
            const DbiasArgs ba{dP, p.dbias + r.batch_index * p.dbias_sb + r.q_begin * p.dbias_si + r.kv_begin,
                               p.dbias_sh, p.dbias_si, p.hq, lq, lk};
            EXACT_TRY(R.launched(launch_dbias_acc(ba, R.st), "dbias"));
        }
        const char *dS = low ? static_cast<const char *>(buf_low) : reinterpret_cast<const char *>(dP);

        for (int64_t g = 0; g < G; ++g) {
            // dQ_h = scale·dS_h·K_hk  (col-major: dQᵀ[d, lq] = Kᵀ[d, lk]·dSᵀ[lk, lq])
            GemmOp dq{CUBLAS_OP_N, CUBLAS_OP_N, p.d, lq, lk,
                      elem(p.k, k0, p.dtype), io, p.k_ss, p.k_sh,
                      dS + g * head_cells * opsz, opt, lk, G * head_cells,
                      elem(p.dq, dq0 + g * p.dq_sh, p.dtype), io, p.dq_ss, G * p.dq_sh,
                      p.scale, 0.f, p.hkv};
            EXACT_TRY(R.gemm(dq, "dQ = dS·K"));
            // dK_hk (+)= scale·dS_hᵀ·Q_h  (col-major: dKᵀ[d, lk] = Qᵀ[d, lq]·op_T(dS)[lq, lk])
            GemmOp dk{CUBLAS_OP_N, CUBLAS_OP_T, p.d, lk, lq,
                      elem(p.q, q0 + g * p.q_sh, p.dtype), io, p.q_ss, G * p.q_sh,
                      dS + g * head_cells * opsz, opt, lk, G * head_cells,
                      dKacc, CUDA_R_32F, p.d, lk * p.d,
                      p.scale, g == 0 ? 0.f : 1.f, p.hkv};
            EXACT_TRY(R.gemm(dk, "dK = dSᵀ·Q"));
        }
        EXACT_TRY(R.launched(launch_store_acc(dKacc, elem(p.dk, dk0, p.dtype), p.dtype, p.hkv, lk,
                                              p.d, p.dk_ss, p.dk_sh, R.st),
                             "store dk"));
        EXACT_TRY(R.launched(launch_store_acc(dVacc, elem(p.dv, dv0, p.dtype), p.dtype, p.hkv, lk,
                                              Dv, p.dv_ss, p.dv_sh, R.st),
                             "store dv"));
    }
    return FATTN_OK;
}

}  // namespace fattn::cuda::exact
