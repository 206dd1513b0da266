// path_emu.h — the CUDA PaTH backend's kernels and launch sequence (src/cuda/path) run on the CPU
// through the emulation of emu.h: same source, same workspace layout, host buffers. For tests
// (tests/test_path_emu.cpp) and debugging; not part of libfattn.
#pragma once

#include <functional>
#include <string>

#include "core/path_params.h"

namespace fattn::emu {

// Bytes of the GPU workspace of one call (gpu_layout.h).
size_t path_workspace_bytes(const PathFwdParams &p, fattn_dir dir, size_t *history_bytes = nullptr);

// The largest dynamic shared memory of the kernels for one input dtype and kernel head dim
// (32, 64, 128), as the CUDA backend's selection compares it with the device's per-block limit.
size_t path_max_smem(fattn_dtype dtype, int D);
// Whether this build of the emulation launches the PaTH dK/dV kernel on wgmma (bwd_dkv_sm90.cuh:
// FATTN_PATH_DKV_SM90) in place of the mma.sync one for this input dtype and kernel head dim.
bool path_wgmma_dkv_at(fattn_dtype dtype, int kernel_d);
// The same for seg-inter's key loop (bwd_seg_sm90.cuh: FATTN_PATH_SEG_SM90).
bool path_wgmma_seg_at(fattn_dtype dtype, int kernel_d);
// The same for the history producer's walk (bwd_hist_sm90.cuh: FATTN_PATH_HIST_SM90).
bool path_wgmma_hist_at(fattn_dtype dtype, int kernel_d);

// One forward or backward on host buffers (p as the CUDA backend receives it, the STRICT check
// included). reverse: run the threads of every block in reverse order. after_launch, when set, is
// called after each kernel with the kernel's type name (typeid(...).name(): it contains the
// struct's name, e.g. "KHist"), for tests that look at a buffer between two kernels. keep_t0: 0 or
// 1 sets PathDev::keep_t0 of a backward (prep.cuh), -1 keeps the build's FATTN_PATH_KEEP_T0.
fattn_status path_run(const PathBwdParams &p, void *workspace, bool bwd, std::string *err, bool reverse = false,
                      const std::function<void(const char *)> &after_launch = {}, int keep_t0 = -1);

}  // namespace fattn::emu
