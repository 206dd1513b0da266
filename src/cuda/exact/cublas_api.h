// cublas_api.h — cuBLAS opened at run time (dlopen) for the exact arm, instead of linked.
//
// Why: libfattn with the CUDA backend is a static library by default, and everything a static
// library references must be named at the consumer's link. Linking cuBLAS made every program
// that links fattn — a CPU-only trainer too — link (and ship) libcublas. Only the CUDA exact
// arm calls it, so it is loaded on that arm's first call: a program that never runs it never
// needs cuBLAS, and one that does gets FATTN_ERR_BACKEND_UNAVAILABLE with the loader's message
// when it is missing (never a crash, never a fallback).
//
// The function-pointer types come from cublas_v2.h itself (decltype), so a signature cannot
// drift from the header the build used; the symbol names are the header's macro-expanded ones
// (cublasCreate -> cublasCreate_v2).
#pragma once

#include <cublas_v2.h>

#include <string>

namespace fattn::cuda::exact {

struct CublasApi {
    decltype(&cublasCreate) create;
    decltype(&cublasSetStream) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasSetPointerMode) set_pointer_mode;
    decltype(&cublasGemmStridedBatchedEx) gemm_strided_batched_ex;
    decltype(&cublasGetStatusString) status_string;
};

// The process-wide table, loaded once (thread-safe); nullptr with *err set when libcublas or one
// of its symbols cannot be found.
const CublasApi *cublas_api(std::string *err);

}  // namespace fattn::cuda::exact
