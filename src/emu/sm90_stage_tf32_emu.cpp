// sm90_stage_tf32_emu.cpp — src/cuda/attn/sm90/stage_tf32.cu compiled for the CPU emulation: the same launcher
// source, its kernels run by launch_kernel through emu::launch (emu/cuda_runtime_host.h).
#include "cuda/attn/sm90/stage_tf32.cu"
