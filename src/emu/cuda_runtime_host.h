// cuda_runtime_host.h — the part of the CUDA runtime API the kernel launchers use (src/cuda/attn:
// launch.h's launch_kernel, the sm90 launchers and the tf32 pre-pass), for a host compiler on top
// of the CPU emulation: the error codes and stream type, dim3, the shared-memory opt-in (nothing
// to do) and launch_kernel, which runs the kernel through emu::launch. A kernel's failure (a
// deadlock, a misaligned access) is cudaErrorLaunchFailure, its message in emu_last_error().
//
// Included in place of <cuda_runtime.h> when __CUDACC__ is not defined; never part of libfattn.
#pragma once

#if defined(__CUDACC__)
#error "emu/cuda_runtime_host.h is for host compilers; nvcc uses the CUDA headers"
#endif

#include <exception>
#include <string>

#include "emu/cuda_host.h"

enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorLaunchFailure = 719, cudaErrorNotSupported = 801 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
using cudaStream_t = struct fattn_emu_stream *;

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

template <typename K> inline cudaError_t cudaFuncSetAttribute(K, cudaFuncAttribute, int) { return cudaSuccess; }

namespace fattn::emu {
// What the last failed emulated launch of this thread reported.
inline std::string &emu_last_error() {
    thread_local std::string e;
    return e;
}
// The options of this thread's emulated launches (the launcher of attn_emu.cpp sets them).
inline Options &emu_launch_options() {
    thread_local Options o;
    return o;
}
}  // namespace fattn::emu

inline cudaError_t cudaGetLastError() { return cudaSuccess; }  // launch_kernel returns each launch's status

// k(args...) on every thread of a grid of blocks of `threads` threads with `smem` bytes each.
template <typename Kernel, typename... Args>
cudaError_t fattn_emu_launch(Kernel k, dim3 grid, int threads, size_t smem, const Args &...args) {
    try {
        fattn::emu::launch({int(grid.x), int(grid.y), int(grid.z)}, threads, smem, [&](char *) { k(args...); },
                           fattn::emu::emu_launch_options());
    } catch (const std::exception &e) {
        fattn::emu::emu_last_error() = e.what();
        return cudaErrorLaunchFailure;
    }
    return cudaSuccess;
}
