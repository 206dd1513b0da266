// backend_mem.cpp — contexts and buffers for fattn-test (see backend_mem.h).
#include "test/backend_mem.h"

#include "test/host_par.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#ifdef FATTN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace fattn_test {

fattn_ctx_t *make_ctx(BackendKind b, int nthreads, std::string *why, fattn_cuda_family family) {
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
    if (b == BackendKind::CUDA && fattn_ctx_set_cuda_family(ctx, family) != FATTN_OK) {
        *why = std::string("cannot set the CUDA kernel family: ") + fattn_ctx_last_error(ctx);
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

// Host memory of the CPU backend: big copies, fills and compares on every core (fixed 16 MiB
// blocks).
constexpr int64_t kHostBlock = int64_t(16) << 20;

bool DevBuf::upload(const void *host, size_t bytes, size_t offset) {
    if (offset + bytes > bytes_) return false;
    if (kind_ == BackendKind::CPU) {
        char *d = static_cast<char *>(ptr_) + offset;
        const char *h = static_cast<const char *>(host);
        par_range(int64_t(bytes), kHostBlock, [&](int64_t a, int64_t b) { std::memcpy(d + a, h + a, size_t(b - a)); });
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
        const char *d = static_cast<const char *>(ptr_) + offset;
        char *h = static_cast<char *>(host);
        par_range(int64_t(bytes), kHostBlock, [&](int64_t a, int64_t b) { std::memcpy(h + a, d + a, size_t(b - a)); });
        return true;
    }
#ifdef FATTN_WITH_CUDA
    return cudaMemcpy(host, static_cast<const char *>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
#else
    return false;
#endif
}

// Big buffers (the --large cases hold several GiB) go through one chunk at a time.
constexpr size_t kChunk = size_t(64) << 20;

bool DevBuf::poison(size_t from) {
    if (from >= bytes_) return from == bytes_;
    if (kind_ == BackendKind::CPU) {
        char *d = static_cast<char *>(ptr_) + from;
        par_range(int64_t(bytes_ - from), kHostBlock, [&](int64_t a, int64_t b) { std::memset(d + a, kPoisonByte, size_t(b - a)); });
        return true;
    }
    // CUDA: a NaN host buffer copied in (not a cudaMemset), so poisoning exercises the same copy
    // as the uploads.
    std::vector<unsigned char> nan(std::min(kChunk, bytes_ - from), kPoisonByte);
    for (size_t o = from; o < bytes_; o += nan.size())
        if (!upload(nan.data(), std::min(nan.size(), bytes_ - o), o)) return false;
    return true;
}

bool DevBuf::equals(const void *host, size_t bytes, size_t offset) const {
    if (offset + bytes > bytes_) return false;
    const char *h = static_cast<const char *>(host);
    if (kind_ == BackendKind::CPU) {
        const char *d = static_cast<const char *>(ptr_) + offset;
        std::atomic<bool> same{true};
        par_range(int64_t(bytes), kHostBlock, [&](int64_t a, int64_t b) {
            if (same && std::memcmp(d + a, h + a, size_t(b - a)) != 0) same = false;
        });
        return same;
    }
    std::vector<char> tmp(std::min(kChunk, bytes));
    for (size_t o = 0; o < bytes; o += tmp.size()) {
        const size_t n = std::min(tmp.size(), bytes - o);
        if (!download(tmp.data(), n, offset + o) || std::memcmp(tmp.data(), h + o, n) != 0) return false;
    }
    return true;
}

void backend_sync(BackendKind b) {
#ifdef FATTN_WITH_CUDA
    if (b == BackendKind::CUDA) cudaDeviceSynchronize();
#else
    (void)b;
#endif
}

size_t device_total_bytes(BackendKind b) {
#ifdef FATTN_WITH_CUDA
    if (b == BackendKind::CUDA) {
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) return total_b;
        cudaGetLastError();
    }
#else
    (void)b;
#endif
    return 0;
}

}  // namespace fattn_test
