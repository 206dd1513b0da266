// sm90_bwd_emu.cpp — src/cuda/attn/sm90/bwd.cu compiled for the CPU emulation: the same launcher
// source, its kernels run by launch_kernel through emu::launch (emu/cuda_runtime_host.h).
#include "cuda/attn/sm90/bwd.cu"
