// backend_mem.cpp — contexts and buffers for fattn-test (see backend_mem.h).
#include "test/backend_mem.h"

#include <cstdlib>
#include <cstring>

#ifdef FATTN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace fattn_test {

fattn_ctx_t *make_ctx(BackendKind b, int nthreads, std::string *why) {
    fattn_ctx_t *ctx = nullptr;
    fattn_status st = b == BackendKind::CPU ? fattn_ctx_init_cpu(nthreads, &ctx)
                                            : fattn_ctx_init_cuda(0, nullptr, &ctx);
    if (st != FATTN_OK) {
        *why = std::string(fattn_status_string(st)) + ": " + fattn_ctx_last_error(nullptr);
        return nullptr;
    }
    if (fattn_ctx_backend(ctx) != (b == BackendKind::CPU ? FATTN_BACKEND_CPU : FATTN_BACKEND_CUDA)) {
        *why = "context reports a different backend than requested";
        fattn_ctx_free(ctx);
        return nullptr;
    }
    return ctx;
}

bool DevBuf::alloc(BackendKind b, size_t bytes) {
    release();
    kind_ = b;
    bytes_ = bytes;
    size_t n = bytes ? bytes : 1;
    if (b == BackendKind::CPU) {
        ptr_ = std::malloc(n);
        return ptr_ != nullptr;
    }
#ifdef FATTN_WITH_CUDA
    if (cudaMalloc(&ptr_, n) != cudaSuccess) {
        ptr_ = nullptr;
        return false;
    }
    return true;
#else
    return false;
#endif
}

void DevBuf::release() {
    if (!ptr_) return;
    if (kind_ == BackendKind::CPU) std::free(ptr_);
#ifdef FATTN_WITH_CUDA
    else cudaFree(ptr_);
#endif
    ptr_ = nullptr;
    bytes_ = 0;
}

bool DevBuf::upload(const void *host, size_t bytes, size_t offset) {
    if (offset + bytes > bytes_) return false;
    if (kind_ == BackendKind::CPU) {
        if (bytes) std::memcpy(static_cast<char *>(ptr_) + offset, host, bytes);
        return true;
    }
#ifdef FATTN_WITH_CUDA
    return cudaMemcpy(static_cast<char *>(ptr_) + offset, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
#else
    return false;
#endif
}

bool DevBuf::download(void *host, size_t bytes, size_t offset) const {
    if (offset + bytes > bytes_) return false;
    if (kind_ == BackendKind::CPU) {
        if (bytes) std::memcpy(host, static_cast<const char *>(ptr_) + offset, bytes);
        return true;
    }
#ifdef FATTN_WITH_CUDA
    return cudaMemcpy(host, static_cast<const char *>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
#else
    return false;
#endif
}

bool DevBuf::poison() {
    // A NaN host buffer copied in (not a memset), so the CUDA path exercises the same copy.
    std::vector<unsigned char> nan(bytes_, kPoisonByte);
    return upload(nan.data(), bytes_);
}

void backend_sync(BackendKind b) {
#ifdef FATTN_WITH_CUDA
    if (b == BackendKind::CUDA) cudaDeviceSynchronize();
#else
    (void)b;
#endif
}

}  // namespace fattn_test
