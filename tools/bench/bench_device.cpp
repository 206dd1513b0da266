// bench_device.cpp — memory, copies, L2 flush and timers for fattn-bench: cudart when the tools
// are built with CUDA (FATTN_WITH_CUDA), the host otherwise. The bench uses the legacy default
// stream (the CUDA contexts it creates use stream NULL), so events and memsets order with the
// library's work without extra synchronization.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "bench/bench.h"

#if defined(FATTN_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace fbench::dev {

namespace {
double now_ms() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}
}  // namespace

double median(std::vector<double> v) {
    if (v.empty()) return -1;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#if defined(FATTN_WITH_CUDA)
bool cuda_built() { return true; }
bool has_device() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return n > 0;
}

bool alloc(fattn_backend be, void **p, size_t bytes) {
    if (bytes == 0) bytes = 64;
    if (be == FATTN_BACKEND_CUDA) {
        if (cudaMalloc(p, bytes) != cudaSuccess) {
            cudaGetLastError();
            *p = nullptr;
            return false;
        }
        return true;
    }
    *p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    return *p != nullptr;
}
void free(fattn_backend be, void *p) {
    if (!p) return;
    if (be == FATTN_BACKEND_CUDA)
        cudaFree(p);
    else
        std::free(p);
}
bool upload(fattn_backend be, void *dst, const void *src, size_t bytes) {
    if (be == FATTN_BACKEND_CUDA) return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
    std::memcpy(dst, src, bytes);
    return true;
}
bool download(fattn_backend be, void *dst, const void *src, size_t bytes) {
    if (be == FATTN_BACKEND_CUDA) return cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
    std::memcpy(dst, src, bytes);
    return true;
}
bool memset0(fattn_backend be, void *p, size_t bytes) {
    if (be == FATTN_BACKEND_CUDA) return cudaMemset(p, 0, bytes) == cudaSuccess;
    std::memset(p, 0, bytes);
    return true;
}
void sync(fattn_backend be) {
    if (be == FATTN_BACKEND_CUDA) cudaDeviceSynchronize();
}
bool mem_info(size_t *free_b, size_t *total_b) {
    return cudaMemGetInfo(free_b, total_b) == cudaSuccess;
}
std::string device_name() {
    cudaDeviceProp prop;
    int d = 0;
    if (cudaGetDevice(&d) != cudaSuccess || cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
        cudaGetLastError();
        return "no CUDA device";
    }
    return std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
           std::to_string(prop.minor) + ", " + std::to_string(prop.multiProcessorCount) + " SMs)";
}
void flush_l2(fattn_backend be) {
    if (be != FATTN_BACKEND_CUDA) return;
    // Twice the L2 size, written on the timed stream before each rep, so no rep reads its
    // inputs from a cache the previous rep warmed (llm.c's benchmark_kernel does the same).
    static void *buf = nullptr;
    static size_t bytes = 0;
    if (!buf) {
        int d = 0, l2 = 0;
        cudaGetDevice(&d);
        cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, d);
        bytes = size_t(std::max(l2, 1 << 20)) * 2;
        if (cudaMalloc(&buf, bytes) != cudaSuccess) {
            cudaGetLastError();
            buf = nullptr;
            return;
        }
    }
    cudaMemsetAsync(buf, 0x5a, bytes, nullptr);
}
Timer::Timer(fattn_backend b) : be(b) {
    if (be == FATTN_BACKEND_CUDA) {
        cudaEvent_t a, c;
        cudaEventCreate(&a);
        cudaEventCreate(&c);
        ev0 = a;
        ev1 = c;
    }
}
Timer::~Timer() {
    if (ev0) cudaEventDestroy(static_cast<cudaEvent_t>(ev0));
    if (ev1) cudaEventDestroy(static_cast<cudaEvent_t>(ev1));
}
void Timer::start() {
    if (be == FATTN_BACKEND_CUDA)
        cudaEventRecord(static_cast<cudaEvent_t>(ev0), nullptr);
    else
        t0 = now_ms();
}
double Timer::stop_ms() {
    if (be != FATTN_BACKEND_CUDA) return now_ms() - t0;
    cudaEventRecord(static_cast<cudaEvent_t>(ev1), nullptr);
    cudaEventSynchronize(static_cast<cudaEvent_t>(ev1));
    float ms = -1;
    cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(ev0), static_cast<cudaEvent_t>(ev1));
    return ms;
}
#else
bool cuda_built() { return false; }
bool has_device() { return false; }
bool alloc(fattn_backend, void **p, size_t bytes) {
    if (bytes == 0) bytes = 64;
    *p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    return *p != nullptr;
}
void free(fattn_backend, void *p) { std::free(p); }
bool upload(fattn_backend, void *dst, const void *src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    return true;
}
bool download(fattn_backend, void *dst, const void *src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    return true;
}
bool memset0(fattn_backend, void *p, size_t bytes) {
    std::memset(p, 0, bytes);
    return true;
}
void sync(fattn_backend) {}
bool mem_info(size_t *, size_t *) { return false; }
std::string device_name() { return "no CUDA in this build"; }
void flush_l2(fattn_backend) {}
Timer::Timer(fattn_backend b) : be(b) {}
Timer::~Timer() {}
void Timer::start() { t0 = now_ms(); }
double Timer::stop_ms() { return now_ms() - t0; }
#endif

}  // namespace fbench::dev
