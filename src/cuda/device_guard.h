// device_guard.h — makes a CUDA device current for a call and restores the caller's on return
// (the exact arm and the merge run on the context's device, whatever the caller had set).
#pragma once

#include <cuda_runtime.h>

namespace fattn::cuda {

struct DeviceGuard {
    int prev = -1;
    explicit DeviceGuard(int dev) {
        if (cudaGetDevice(&prev) == cudaSuccess && prev != dev) cudaSetDevice(dev);
    }
    ~DeviceGuard() {
        if (prev >= 0) cudaSetDevice(prev);
    }
    DeviceGuard(const DeviceGuard &) = delete;
    DeviceGuard &operator=(const DeviceGuard &) = delete;
};

}  // namespace fattn::cuda
