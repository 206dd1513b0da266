// bench.h — shared types of fattn-bench (tools/fattn-bench.cpp + tools/bench/*.cpp).
//
// A Case is one attention shape; every case runs all arms (fused, exact, and cuDNN SDPA when
// built) in the same process on the same inputs, so their ratios are readable (LESSONS.md:
// unpaired arms produced every wrong conclusion HOT-Step had). Arms talk to fattn only through
// the public C API; device memory and timing go through the small Device helpers below
// (cudart in CUDA mode, the host in CPU mode).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fattn/fattn.h"

namespace fbench {

struct Case {
    std::string name;       // "windowed S=1250"
    std::string site;       // grouping label for summary tables ("windowed", "full", "cross", ...)
    int64_t B = 1, Sq = 256, Skv = 256, Hq = 4, Hkv = 4, D = 64;
    fattn_dtype dtype = FATTN_F32;
    fattn_prec prec = FATTN_PREC_AUTO;  // requested; the resolved one is printed
    fattn_causal causal = FATTN_CAUSAL_NONE;
    int64_t band = -1;      // >= 0: a ±band window given as a dense -inf bias [1, 1, Sq, Skv]
    int64_t window = -1;    // >= 0: the same ±window as the analytic mask (window_left/right)
    std::string peer;       // reference numbers from TARGETS.md (other process, for context)
};

struct Options {
    fattn_backend backend = FATTN_BACKEND_CPU;
    int reps = -1;          // -1: per backend default (cpu 5, cuda 10)
    int warmup = -1;        // -1: cpu 1, cuda 3
    int threads = 0;        // CPU threads (0 = hardware; presets may pin it)
    bool threads_set = false;
    std::string csv;
    std::string arms = "fused,exact,cudnn";
    std::string preset = "small";
    double slow_ms = 400;        // a first fwd+bwd slower than this: 1 warm-up, at most 3 reps
    double max_mem_frac = 0.85;  // CUDA: skip an arm whose modelled peak exceeds this of free memory
};

// Inputs of one case, on the host, contiguous [B, S, H, D] in the case dtype (bias [Sq, Skv]).
struct HostData {
    std::vector<uint8_t> q, k, v, dout, bias;
};

// What one arm measured. Times are medians in milliseconds (< 0: not measured).
struct ArmResult {
    std::string arm;
    std::string status = "ok";  // "ok", or why not ("unsupported: ...", "skipped: ...", "error: ...")
    std::string prec = "-";     // resolved precision
    double fwd_ms = -1, fwdbwd_ms = -1;
    uint64_t saved_bytes = 0;       // fattn_attn_memory saved_bytes (kept for the backward)
    uint64_t model_peak = 0;        // max(fwd_peak + grads, bwd_peak): the model, for this harness's buffers
    double measured_peak = -1;      // bytes (CUDA: cudaMemGetInfo; CPU: allocation high-water)
    bool have_values = false;
    std::vector<float> o, lse, dq, dk, dv;  // results of the last run (parity)
    bool ok() const { return status == "ok"; }
};

// FLOP convention (FlashAttention's): fwd 4·B·Hq·Sq·Skv·D, halved for causal; bwd 2.5× fwd.
double fwd_flops(const Case &c);

// Presets: name -> cases for a backend. Unknown name: empty + false.
bool preset_cases(const std::string &name, fattn_backend backend, std::vector<Case> *out,
                  Options *opt);
void list_presets();

// Deterministic random inputs (uniform in [-1, 1], the band as -inf outside ±band).
HostData make_inputs(const Case &c, uint64_t seed);

// Runs one fattn arm (algo FUSED or EXACT) of a case.
// family: the CUDA kernel family (arm "portable" = FUSED on the sm_80+ family, for A/B on Hopper).
ArmResult run_fattn_arm(const Case &c, const Options &opt, fattn_algo algo, const HostData &in,
                        fattn_cuda_family family = FATTN_CUDA_FAMILY_AUTO);

// cuDNN SDPA through cudnn-frontend (bench_cudnn.cpp). cudnn_built() is false when fattn-bench
// was built without the frontend headers; run_cudnn_arm then reports "skipped: ...".
bool cudnn_built();
ArmResult run_cudnn_arm(const Case &c, const Options &opt, const HostData &in);

// The CPU ceiling (bench_sgemm.cpp): OpenBLAS SGEMM n³ on `threads` threads (0 = hardware),
// median of reps, in GFLOP/s; < 0 when fattn-bench was built without OpenBLAS.
bool sgemm_built();
std::string sgemm_name();  // OpenBLAS's build config and core, or why there is none
double sgemm_gflops(int threads, int n, int reps);
constexpr int kSgemmN = 2048;  // TARGETS.md's CPU ceiling is SGEMM 2048³

// max over o, dq, dk, dv (and lse where finite) of max|a − b| / max|b|; < 0 if not comparable.
double max_rel_err(const ArmResult &a, const ArmResult &b, bool with_lse);

// ---- device helpers (bench_device.cpp): CUDA via cudart when built with it, else the host ----
namespace dev {
bool cuda_built();
bool has_device();  // a CUDA device is present and usable
bool alloc(fattn_backend be, void **p, size_t bytes);
void free(fattn_backend be, void *p);
bool upload(fattn_backend be, void *dst, const void *src, size_t bytes);
bool download(fattn_backend be, void *dst, const void *src, size_t bytes);
bool memset0(fattn_backend be, void *p, size_t bytes);
void sync(fattn_backend be);
bool mem_info(size_t *free_b, size_t *total_b);  // CUDA only
std::string device_name();
void flush_l2(fattn_backend be);                 // CUDA: overwrite a buffer larger than L2
// Median time (ms) of fn over reps runs after warmup runs (CUDA events on the legacy stream
// with an L2 flush before each rep; steady clock on the CPU). Returns < 0 if fn ever fails.
template <typename F>
double time_median(fattn_backend be, int warmup, int reps, F &&fn);
double median(std::vector<double> v);
// Event timer (CUDA) / steady clock (CPU)
struct Timer {
    explicit Timer(fattn_backend be);
    ~Timer();
    void start();
    double stop_ms();  // synchronizes
    fattn_backend be;
    void *ev0 = nullptr, *ev1 = nullptr;
    double t0 = 0;
};
}  // namespace dev

template <typename F>
double dev::time_median(fattn_backend be, int warmup, int reps, F &&fn) {
    for (int i = 0; i < warmup; ++i)
        if (!fn()) return -1;
    sync(be);
    std::vector<double> t;
    Timer tm(be);
    for (int i = 0; i < reps; ++i) {
        flush_l2(be);
        tm.start();
        if (!fn()) return -1;
        t.push_back(tm.stop_ms());
    }
    return median(t);
}

}  // namespace fbench
