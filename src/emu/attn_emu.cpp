// attn_emu.cpp — the emulated fused CUDA attention backend (attn_emu.h): sequence.h with a
// launcher that runs every kernel through emu::launch.
#include "emu/attn_emu.h"

#include <stdexcept>

#include "cuda/attn/mma_bwd.cuh"
#include "cuda/attn/mma_fwd.cuh"
#include "cuda/attn/scalar.cuh"
#include "cuda/attn/sequence.h"
#include "emu/emu.h"
#ifdef FATTN_HAVE_SM90
#include "cuda/attn/launch.h"  // the sm90 launchers (sm90/fwd.cu, bwd.cu: emu/sm90_*_emu.cpp)
#endif

namespace fattn::emu {
namespace {

using namespace cuda::attn;

// Err: the empty string, or what failed (a kernel's exception: a deadlock, a misaligned access).
struct EmuLauncher {
    using Err = std::string;
    Options opt;
    static Err ok() { return {}; }

    template <class Body> Err run(int64_t gx, int64_t gy, int64_t gz, int threads, size_t smem, Body body) {
        if (gx <= 0 || gy <= 0 || gz <= 0) return ok();
        try {
            emu::launch({int(gx), int(gy), int(gz)}, threads, smem, [&](char *) { body(); }, opt);
        } catch (const std::exception &e) {
            return e.what();
        }
        return ok();
    }
    static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

    Err bias_prep(const AttnFwdParams &p, const Workspace &w, uint8_t *map, bool vec, float *ceil) {
        return run(bias_prep_blocks(p, w), 1, 1, 256, 0, [&] { bias_prep_kernel(p, w, map, vec, ceil); });
    }
    Err delta(const AttnBwdParams &p, const KArgs &a, int64_t rows, bool v8) {
        const int64_t blocks = cdiv(rows, 8);
        switch (p.dtype) {
        case FATTN_F16: return run(blocks, 1, 1, 256, 0, [&] { delta_kernel<__half>(p, a, rows, v8); });
        case FATTN_BF16: return run(blocks, 1, 1, 256, 0, [&] { delta_kernel<__nv_bfloat16>(p, a, rows, v8); });
        default: return run(blocks, 1, 1, 256, 0, [&] { delta_kernel<float>(p, a, rows, v8); });
        }
    }

    template <typename T, int DB> Err mma_fwd(const AttnFwdParams &p, const KArgs &a) {
        return run(cdiv(p.seqlen_q, mma_fwd_bm(DB, sizeof(T))), p.hq, p.batch, 32 * mma_fwd_warps(sizeof(T)),
                   mma_fwd_smem(DB, sizeof(T)), [&] { mma_fwd_kernel<T, DB>(p, a); });
    }
    template <typename T, int DB> Err mma_bwd(const AttnBwdParams &p, const KArgs &a) {
        Err e = run(cdiv(p.seqlen_kv, mma_bwd_bn()) * mma_dkdv_splits(DB), p.hkv, p.batch, mma_threads(), mma_dkdv_smem(DB, sizeof(T)),
                    [&] { mma_dkdv_kernel<T, DB>(p, a); });
        if (e != ok()) return e;
        return run(cdiv(p.seqlen_q, mma_dq_bm(DB, sizeof(T))), p.hq, p.batch, 32 * mma_fwd_warps(sizeof(T)),
                   mma_dq_smem(DB, sizeof(T)), [&] { mma_dq_kernel<T, DB>(p, a); });
    }
    Err dbias_zero(const AttnBwdParams &p, int64_t rows) {
        return run(cdiv(rows, 8), 1, 1, 256, 0, [&] { dbias_zero_kernel(p, rows); });
    }
    template <typename T, int DB> Err mma_dbias(const AttnBwdParams &p, const KArgs &a) {
        int64_t g[3];
        mma_dbias_grid(p, DB, sizeof(T), g);
        return run(g[0], g[1], g[2], mma_threads(), mma_dbias_smem(DB, sizeof(T)), [&] { mma_dbias_kernel<T, DB>(p, a); });
    }
    // prec NATIVE (bf16 / f16) and TF32 (f32), every head-dim bucket
    template <class K> Err native(const AttnFwdParams &p, int db, K &&k) {
        return mma_bucket(db, [&](auto b) {
            return p.dtype == FATTN_BF16 ? k(b, __nv_bfloat16{}) : k(b, __half{});
        });
    }
    Err native_dbias(const AttnBwdParams &p, const KArgs &a, int db) {
        return native(p, db, [&](auto b, auto t) { return mma_dbias<decltype(t), b.value>(p, a); });
    }
    Err tf32_dbias(const AttnBwdParams &p, const KArgs &a, int db) {
        return mma_bucket(db, [&](auto b) { return mma_dbias<float, b.value>(p, a); });
    }
    Err native_fwd(const AttnFwdParams &p, const KArgs &a, int db) {
        return native(p, db, [&](auto b, auto t) { return mma_fwd<decltype(t), b.value>(p, a); });
    }
    Err native_bwd(const AttnBwdParams &p, const KArgs &a, int db) {
        return native(p, db, [&](auto b, auto t) { return mma_bwd<decltype(t), b.value>(p, a); });
    }
    Err tf32_fwd(const AttnFwdParams &p, const KArgs &a, int db) {
        return mma_bucket(db, [&](auto b) { return mma_fwd<float, b.value>(p, a); });
    }
    Err tf32_bwd(const AttnBwdParams &p, const KArgs &a, int db) {
        return mma_bucket(db, [&](auto b) { return mma_bwd<float, b.value>(p, a); });
    }
    // prec F32: the strict-f32 kernels, any input dtype, every bucket
    template <class K> Err scalar(const AttnFwdParams &p, int db, K &&k) {
        return mma_bucket(db, [&](auto b) {
            return p.dtype == FATTN_BF16 ? k(b, __nv_bfloat16{}) : p.dtype == FATTN_F16 ? k(b, __half{}) : k(b, float{});
        });
    }
    Err scalar_dbias(const AttnBwdParams &p, const KArgs &a, int db) {
        return scalar(p, db, [&](auto b, auto t) {
            int64_t g[3];
            dbias_grid(p, sc_rows(), sc_cols(b.value), g);
            return run(g[0], g[1], g[2], sc_threads(), sc_dbias_smem(b.value),
                       [&] { sc_dbias_kernel<decltype(t), b.value>(p, a); });
        });
    }
    Err scalar_fwd(const AttnFwdParams &p, const KArgs &a, int db) {
        return scalar(p, db, [&](auto b, auto t) {
            return run(cdiv(p.seqlen_q, sc_rows()), p.hq, p.batch, sc_threads(), sc_fwd_smem(b.value),
                       [&] { sc_fwd_kernel<decltype(t), b.value>(p, a); });
        });
    }
    Err scalar_bwd(const AttnBwdParams &p, const KArgs &a, int db) {
        return scalar(p, db, [&](auto b, auto t) {
            Err e = run(cdiv(p.seqlen_kv, sc_rows()), p.hkv, p.batch, sc_threads(), sc_dkdv_smem(b.value),
                        [&] { sc_dkdv_kernel<decltype(t), b.value>(p, a); });
            if (e != ok()) return e;
            return run(cdiv(p.seqlen_q, sc_rows()), p.hq, p.batch, sc_threads(), sc_dq_smem(b.value),
                       [&] { sc_dq_kernel<decltype(t), b.value>(p, a); });
        });
    }

#ifdef FATTN_HAVE_SM90
    // The sm90 family: its own launchers (sm90/fwd.cu, bwd.cu) compiled for the emulation, their
    // launch_kernel running each kernel through emu::launch with this launcher's options.
    Err rt(cudaError_t e) const {
        if (e == cudaSuccess) return ok();
        return emu_last_error().empty() ? "cuda error " + std::to_string(int(e)) : emu_last_error();
    }
    template <class F> Err sm90(F &&f) {
        emu_last_error().clear();
        emu_launch_options() = opt;
        return rt(f());
    }
    Err sm90_fwd(const AttnFwdParams &p, const KArgs &a, int db) {
        return sm90([&] { return cuda::attn::sm90_fwd(p, a, db, nullptr); });
    }
    Err sm90_fwd_tf32(const AttnFwdParams &p, const KArgs &a, int db, const Workspace &w, void *ws) {
        return sm90([&] { return cuda::attn::sm90_fwd_tf32(p, a, db, w, ws, nullptr); });
    }
    Err sm90_bwd(const AttnBwdParams &p, const KArgs &a, int db, const Workspace &w, void *ws) {
        return sm90([&] { return cuda::attn::sm90_bwd(p, a, db, w, ws, nullptr); });
    }
    Err sm90_bwd_tf32(const AttnBwdParams &p, const KArgs &a, int db, const Workspace &w, void *ws) {
        return sm90([&] { return cuda::attn::sm90_bwd_tf32(p, a, db, w, ws, nullptr); });
    }
#endif

    fattn_status check(const Err &e, const char *what, std::string *err) const {
        if (e.empty()) return FATTN_OK;
        if (err) *err = std::string("emulated cuda fused attn: ") + what + ": " + e;
        return FATTN_ERR_INTERNAL;
    }
};

}  // namespace

cuda::DeviceInfo attn_device() {
    cuda::DeviceInfo d;
    d.sm_major = 8, d.sm_minor = 0, d.num_sms = 132;
    d.smem_optin = 232448;
    d.family = FATTN_CUDA_FAMILY_PORTABLE;
    return d;
}

cuda::DeviceInfo attn_device_sm90() {
    cuda::DeviceInfo d = attn_device();
    d.sm_major = 9, d.sm_minor = 0;
    d.family = FATTN_CUDA_FAMILY_AUTO;
    return d;
}

bool attn_sm90_d256_built() { return FATTN_SM90_D256 != 0; }
bool attn_sm90_dq_fused_built() { return FATTN_SM90_DQ_FUSED != 0; }

// With CUDA, choose() is libfattn's, built without this library's switches: the fused dQ is set
// here as select.cpp sets it.
fattn_status attn_choose(const AttnFwdParams &p, Choice *c, std::string *why, bool sm90) {
    const cuda::DeviceInfo dev = sm90 ? attn_device_sm90() : attn_device();
    const fattn_status s = choose(p, dev, c, why);
    if (s == FATTN_OK && FATTN_SM90_DQ_FUSED != 0 && c->family == Family::SM90_NATIVE)
        c->dq_fused = sm90_dq_fused_ok(p, c->d_bucket, dev.smem_optin);
    return s;
}

// The layout as this library's kernels carve it (its switches: the fused dQ's regions), not
// libfattn's workspace_size, which may be built without them.
size_t attn_workspace_bytes(const AttnFwdParams &p, const Choice &c, fattn_dir dir) {
    return Workspace::layout(p, c, dir).total;
}

fattn_status attn_fwd(const AttnFwdParams &p, const Choice &c, void *workspace, std::string *err, bool reverse) {
    EmuLauncher l;
    l.opt.reverse = reverse;
    return seq_fwd(l, p, c, workspace, err);
}

fattn_status attn_bwd(const AttnBwdParams &p, const Choice &c, void *workspace, std::string *err, bool reverse) {
    EmuLauncher l;
    l.opt.reverse = reverse;
    return seq_bwd(l, p, attn_device(), c, workspace, err);
}

}  // namespace fattn::emu
