// attn_emu.h — the fused CUDA softmax-attention backend's kernels (src/cuda/attn: the mma.sync
// families, the strict-f32 scalar one, the sm90 families, their pre-passes) and its launch
// sequence (sequence.h) run on the CPU
// through the emulation of emu.h: same source, same selection, same workspace layout, host
// buffers. For tests (tests/emu/test_attn_emu.cpp) and debugging; not part of libfattn.
#pragma once

#include <string>

#include "core/attn_params.h"
#include "cuda/attn/attn_kernels.h"

namespace fattn::emu {

// The device the emulation stands for: sm_80, the portable family, the H200's 227 KiB of opt-in
// shared memory per block, 132 SMs. attn_device_sm90(): the same as sm_90 under family AUTO (the
// H200), where selection takes the sm90 families (wgmma, TMA, mbarriers: emulated too).
cuda::DeviceInfo attn_device();
cuda::DeviceInfo attn_device_sm90();

// Whether this library has the sm90 kernels at D 256, forward and backward (FATTN_SM90_D256; the
// fattn_emu_alt library is built without them).
bool attn_sm90_d256_built();
// Whether this library's 16-bit sm90 backward computes dQ in its dK/dV kernel (FATTN_SM90_DQ_FUSED).
bool attn_sm90_dq_fused_built();

// The CUDA backend's selection for p on attn_device() (sm90: on attn_device_sm90()).
fattn_status attn_choose(const AttnFwdParams &p, cuda::attn::Choice *c, std::string *why, bool sm90 = false);
size_t attn_workspace_bytes(const AttnFwdParams &p, const cuda::attn::Choice &c, fattn_dir dir);

// One forward or backward on host buffers (p's pointers host memory; workspace of
// attn_workspace_bytes). reverse: run the threads of every block in reverse order.
fattn_status attn_fwd(const AttnFwdParams &p, const cuda::attn::Choice &c, void *workspace, std::string *err,
                      bool reverse = false);
fattn_status attn_bwd(const AttnBwdParams &p, const cuda::attn::Choice &c, void *workspace, std::string *err,
                      bool reverse = false);

}  // namespace fattn::emu
