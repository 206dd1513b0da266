// path_emu.cpp — the emulated CUDA PaTH backend (path_emu.h): sequence.h with a launcher that runs
// every kernel through emu::launch and every copy as a memcpy.
#include "emu/path_emu.h"

#include <cstring>
#include <typeinfo>

#include "cuda/path/sequence.h"
#include "emu/emu.h"

namespace fattn::emu {
namespace {

struct EmuLauncher {
    bool sm90 = true;  // the wgmma kernels where the build has them (*_sm90.cuh)
    bool keep_t0 = FATTN_PATH_KEEP_T0 != 0;  // PathDev::keep_t0 in the backward (prep.cuh)
    Options opt;
    std::function<void(const char *)> after;
    std::string error;
    template <class K> void launch(int64_t gx, int gy, const pathk::PathDev &d) {
        if (!error.empty() || gx <= 0 || gy <= 0) return;
        try {
            emu::launch({int(gx), gy, 1}, K::kThreads, K::smem(), [&](char *sm) { K::run(d, sm); }, opt);
            if (after) after(typeid(K).name());
        } catch (const std::exception &e) {
            error = e.what();
        }
    }
    void upload(void *dst, const void *src, size_t n) { std::memcpy(dst, src, n); }
    void download(void *dst, const void *src, size_t n) { std::memcpy(dst, src, n); }
    void fill(void *dst, int byte, size_t n) { std::memset(dst, byte, n); }
    fattn_status status(std::string *err) {
        if (error.empty()) return FATTN_OK;
        if (err) *err = error;
        return FATTN_ERR_INTERNAL;
    }
};

}  // namespace

bool path_wgmma_dkv_at(fattn_dtype dt, int kernel_d) {
    return pathk::dkv_sm90_at(dt == FATTN_F32 ? 4 : 2, kernel_d);
}
bool path_wgmma_seg_at(fattn_dtype dt, int kernel_d) {
    return pathk::seg_sm90_at(dt == FATTN_F32 ? 4 : 2, kernel_d);
}
bool path_wgmma_hist_at(fattn_dtype dt, int kernel_d) {
    return pathk::hist_sm90_at(dt == FATTN_F32 ? 4 : 2, kernel_d);
}

size_t path_workspace_bytes(const PathFwdParams &p, fattn_dir dir, size_t *history_bytes) {
    const pathk::GpuWs w = pathk::gpu_workspace(p, path_layout(p, /*bases=*/false), dir);
    if (history_bytes) *history_bytes = w.history_bytes;
    return w.total;
}

size_t path_max_smem(fattn_dtype dtype, int D) {
    return dtype == FATTN_F32   ? pathk::max_smem<float>(D)
           : dtype == FATTN_F16 ? pathk::max_smem<pathk::f16_t>(D)
                                : pathk::max_smem<pathk::bf16_t>(D);
}

fattn_status path_run(const PathBwdParams &p, void *workspace, bool bwd, std::string *err, bool reverse,
                      const std::function<void(const char *)> &after_launch, int keep_t0) {
    EmuLauncher l;
    l.opt.reverse = reverse;
    if (keep_t0 >= 0) l.keep_t0 = keep_t0 != 0;
    l.after = after_launch;
    return pathk::gpu_run(l, p, workspace, bwd, err);
}

}  // namespace fattn::emu
