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
#include <type_traits>

namespace fattn::cuda::exact {

// cublasGemmStridedBatchedEx is overloaded in C++ (an inline cudaDataType-compute variant), so
// its C entry's type is spelled out; the static_assert picks that overload in an unevaluated
// context, so a mismatch with the header is a compile error (and nothing is linked).
using GemmStridedBatchedEx = cublasStatus_t (*)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
    const void *, cudaDataType, int, long long, const void *, cudaDataType, int, long long,
    const void *, void *, cudaDataType, int, long long, int, cublasComputeType_t, cublasGemmAlgo_t);
static_assert(std::is_same_v<decltype(static_cast<GemmStridedBatchedEx>(&cublasGemmStridedBatchedEx)),
                             GemmStridedBatchedEx>);

struct CublasApi {
    decltype(&cublasCreate) create;
    decltype(&cublasSetStream) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasSetPointerMode) set_pointer_mode;
    GemmStridedBatchedEx gemm_strided_batched_ex;
    decltype(&cublasGetStatusString) status_string;
};

// The process-wide table, loaded once (thread-safe); nullptr with *err set when libcublas or one
// of its symbols cannot be found.
const CublasApi *cublas_api(std::string *err);

}  // namespace fattn::cuda::exact
