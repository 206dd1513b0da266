// cuda_launcher.cuh — the CUDA launcher of the PaTH sequence (sequence.h): one generic
// __global__ wrapper per kernel struct, stream-ordered copies, errors kept until status().
// Included by the per-dtype translation units path_cuda_{f32,f16,bf16}.cu only.
#pragma once

#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <type_traits>

#include "cuda/path/sequence.h"

namespace fattn::pathk {

// Programmatic dependent launch (FATTN_PATH_PDL, default 1; sm_90 devices, builds with sm_90a):
// every kernel of the sequence is launched with programmatic stream serialization and begins by
// waiting for the kernel before it (griddepcontrol.wait: that grid complete, its writes visible),
// so what it computes is what a plain stream order gives; it then lets the next kernel's CTAs
// start (launch_dependents), which take the SMs the tail of this grid leaves idle and wait there,
// rather than being launched once this grid has drained. 0: plain launches. Timed only together
// with FATTN_PATH_INTRA_STATES (params.h: the two, against neither, 4% off fwd+bwd at D128 on an
// H100, 2026-12-07; at D64 within 1.7% either way: T4096 H32 and the varlen pack).
#ifndef FATTN_PATH_PDL
#define FATTN_PATH_PDL 1
#endif
__device__ __forceinline__ void pdl_enter() {
#if FATTN_PATH_PDL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

template <class K> __global__ void __launch_bounds__(K::kThreads) path_kernel(const PathDev p) {
    extern __shared__ __align__(128) char smem[];
    pdl_enter();
    K::run(p, smem);
}
// A kernel that sets K::kMinBlocks > 1 (CTAs per SM it is sized for) gets the register cap that
// keeps them resident; the others keep ptxas's own choice (an explicit 1 is not the same choice).
template <class K> __global__ void __launch_bounds__(K::kThreads, K::kMinBlocks) path_kernel_mb(const PathDev p) {
    extern __shared__ __align__(128) char smem[];
    pdl_enter();
    K::run(p, smem);
}
// A host-to-device copy of up to kBytes as a kernel's by-value argument: stream-ordered like a
// kernel, without the wait for the stream that cudaMemcpyAsync from pageable host memory makes
// before it copies (CudaLauncher::upload: the varlen tables of every call).
struct ParamCopy {
    static constexpr int kBytes = 3840;  // the struct within the 4 KiB of a kernel's arguments
    unsigned char *dst;
    int n;
    alignas(16) unsigned char data[kBytes];
};
static __global__ void __launch_bounds__(256) param_copy(const ParamCopy c) {  // static: one per translation unit
    for (int i = int(threadIdx.x); i < c.n; i += int(blockDim.x)) c.dst[i] = c.data[i];
}

template <class K, class = void> struct has_min_blocks : std::false_type {};
template <class K> struct has_min_blocks<K, std::void_t<decltype(K::kMinBlocks)>> : std::bool_constant<(K::kMinBlocks > 1)> {};

struct CudaLauncher {
    cudaStream_t stream;
    bool sm90 = false;  // the current device is sm_90 (bwd.cuh: launch_dkv, launch_hist, launch_seg_inter; sequence.h: the forward)
    bool keep_t0 = FATTN_PATH_KEEP_T0 != 0;  // PathDev::keep_t0 in the backward (prep.cuh)
    bool pdl = false;  // programmatic dependent launches (FATTN_PATH_PDL: an sm_90 device, kernels built for it)
    cudaError_t err = cudaSuccess;
    const char *where = "";
    template <class K> void launch(int64_t gx, int gy, const PathDev &d) {
        if (err != cudaSuccess || gx <= 0 || gy <= 0) return;
        const size_t sm = K::smem();
        auto *fn = [] {
            if constexpr (has_min_blocks<K>::value) return path_kernel_mb<K>;
            else return path_kernel<K>;
        }();
        if (sm > 48 * 1024) {
            err = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sm));
            if (err != cudaSuccess) return void(where = "cudaFuncSetAttribute");
        }
        if (pdl) {
            cudaLaunchConfig_t cfg{};
            cfg.gridDim = dim3(unsigned(gx), unsigned(gy));
            cfg.blockDim = dim3(unsigned(K::kThreads));
            cfg.dynamicSmemBytes = sm;
            cfg.stream = stream;
            cudaLaunchAttribute attr[1];
            attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            attr[0].val.programmaticStreamSerializationAllowed = 1;
            cfg.attrs = attr;
            cfg.numAttrs = 1;
            err = cudaLaunchKernelEx(&cfg, fn, d);
            if (err == cudaSuccess) err = cudaGetLastError();
        } else {
            fn<<<dim3(unsigned(gx), unsigned(gy)), K::kThreads, sm, stream>>>(d);
            err = cudaGetLastError();
        }
        if (err != cudaSuccess) where = "kernel launch";
    }
    // Up to 16 ParamCopy launches; a larger upload (thousands of sequences) is one cudaMemcpyAsync.
    void upload(void *dst, const void *src, size_t n) {
        if (err != cudaSuccess) return;
        if (n > 16 * size_t(ParamCopy::kBytes)) {
            if ((err = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream)) != cudaSuccess) where = "cudaMemcpyAsync (tables)";
            return;
        }
        for (size_t o = 0; o < n; o += ParamCopy::kBytes) {
            ParamCopy c;
            c.dst = static_cast<unsigned char *>(dst) + o;
            c.n = int(n - o < size_t(ParamCopy::kBytes) ? n - o : size_t(ParamCopy::kBytes));
            std::memcpy(c.data, static_cast<const unsigned char *>(src) + o, size_t(c.n));
            param_copy<<<1, 256, 0, stream>>>(c);
            if ((err = cudaGetLastError()) != cudaSuccess) return void(where = "table copy launch");
        }
    }
    void download(void *dst, const void *src, size_t n) {
        if (err == cudaSuccess && (err = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream)) != cudaSuccess)
            where = "cudaMemcpyAsync (check)";
        if (err == cudaSuccess && (err = cudaStreamSynchronize(stream)) != cudaSuccess) where = "cudaStreamSynchronize";
    }
    void fill(void *dst, int byte, size_t n) {
        if (err == cudaSuccess && (err = cudaMemsetAsync(dst, byte, n, stream)) != cudaSuccess) where = "cudaMemsetAsync";
    }
    fattn_status status(std::string *e) {
        if (err == cudaSuccess) return FATTN_OK;
        if (e) *e = std::string("cuda: PaTH ") + where + ": " + cudaGetErrorString(err);
        cudaGetLastError();
        return FATTN_ERR_DEVICE;
    }
};

// Whether the current device is sm_90 (H100 / H200): the wgmma kernels' condition.
inline bool device_is_sm90() {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return major == 9 && minor == 0;
}

// One input dtype's run and shared-memory need (defined in path_cuda_<dtype>.cu).
template <typename Tin> fattn_status cuda_run(const PathBwdParams &p, void *stream, void *ws, bool bwd, std::string *err);
template <typename Tin> size_t cuda_max_smem(int D);
template <> fattn_status cuda_run<float>(const PathBwdParams &, void *, void *, bool, std::string *);
template <> fattn_status cuda_run<f16_t>(const PathBwdParams &, void *, void *, bool, std::string *);
template <> fattn_status cuda_run<bf16_t>(const PathBwdParams &, void *, void *, bool, std::string *);
template <> size_t cuda_max_smem<float>(int);
template <> size_t cuda_max_smem<f16_t>(int);
template <> size_t cuda_max_smem<bf16_t>(int);

#define FATTN_PATH_CUDA_INSTANTIATE(T)                                                                    \
    template <> fattn_status cuda_run<T>(const PathBwdParams &p, void *stream, void *ws, bool bwd,       \
                                         std::string *err) {                                             \
        CudaLauncher l{static_cast<cudaStream_t>(stream)};                                                \
        const bool is90 = FATTN_PATH_WGMMA_BUILD && device_is_sm90();                                     \
        if (bwd && (FATTN_PATH_DKV_SM90_BUILT || FATTN_PATH_SEG_SM90_BUILT || FATTN_PATH_HIST_SM90_BUILT)) \
            l.sm90 = is90;                                                                                \
        l.pdl = FATTN_PATH_PDL && is90;                                                                   \
        return gpu_run_t<CudaLauncher, T>(l, p, ws, bwd, err);                                            \
    }                                                                                                     \
    template <> size_t cuda_max_smem<T>(int D) { return max_smem<T>(D); }

}  // namespace fattn::pathk
