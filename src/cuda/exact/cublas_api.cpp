// cublas_api.cpp — dlopen of libcublas for the exact arm (see cublas_api.h for why).
// Search: the soname of the cuBLAS major version the build's header has (libcublas.so.13 for
// CUDA 13; a copy already loaded in the process, e.g. by torch, is found by that name), then
// the unversioned development link libcublas.so. The standard dynamic-loader search applies
// (LD_LIBRARY_PATH, rpath of the program, ld.so.cache).
#include "cuda/exact/cublas_api.h"

#include <dlfcn.h>


#define FATTN_STR2(x) #x
#define FATTN_STR(x) FATTN_STR2(x)

namespace fattn::cuda::exact {
namespace {

struct Loaded {
    CublasApi api{};
    bool ok = false;
    std::string err;
};

template <class F>
bool sym(void *lib, const char *name, F *out, std::string *err) {
    *out = reinterpret_cast<F>(dlsym(lib, name));
    if (!*out) *err = std::string("exact: libcublas has no symbol ") + name;
    return *out != nullptr;
}

Loaded load() {
    Loaded l;
    const char *names[] = {"libcublas.so." FATTN_STR(CUBLAS_VER_MAJOR), "libcublas.so"};
    void *lib = nullptr;
    std::string tried;
    for (const char *n : names) {
        lib = dlopen(n, RTLD_NOW | RTLD_LOCAL);
        if (lib) break;
        const char *e = dlerror();
        tried += std::string(tried.empty() ? "" : "; ") + (e ? e : n);
    }
    if (!lib) {
        l.err = "exact: the CUDA exact arm needs cuBLAS, which could not be loaded (" + tried +
                "); put libcublas on the library path";
        return l;
    }
    // The macro-expanded names: cublasCreate is cublasCreate_v2 in cublas_v2.h.
    l.ok = sym(lib, FATTN_STR(cublasCreate), &l.api.create, &l.err) &&
           sym(lib, FATTN_STR(cublasSetStream), &l.api.set_stream, &l.err) &&
           sym(lib, FATTN_STR(cublasSetMathMode), &l.api.set_math_mode, &l.err) &&
           sym(lib, FATTN_STR(cublasSetPointerMode), &l.api.set_pointer_mode, &l.err) &&
           sym(lib, FATTN_STR(cublasGemmStridedBatchedEx), &l.api.gemm_strided_batched_ex, &l.err) &&
           sym(lib, FATTN_STR(cublasGetStatusString), &l.api.status_string, &l.err);
    return l;  // the handle is kept for the process (the handles made from it are too)
}

}  // namespace

const CublasApi *cublas_api(std::string *err) {
    static const Loaded loaded = load();  // C++11 magic static: loaded once, thread-safe
    if (!loaded.ok) {
        if (err) *err = loaded.err;
        return nullptr;
    }
    return &loaded.api;
}

}  // namespace fattn::cuda::exact
