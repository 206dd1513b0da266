// backend_mem.h — the only place fattn-test touches backend memory: contexts, buffers in the
// backend's space (host malloc for the CPU, cudaMalloc for CUDA), upload/download, NaN poison.
// Poison is the byte 0xFF everywhere: a NaN in f32, f16 and bf16 alike, so "still poison" and
// "unwritten" are the same test for every dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fattn/fattn.h"
#include "test/registry.h"

namespace fattn_test {

constexpr unsigned char kPoisonByte = 0xFF;

// A context for the backend; on failure returns nullptr and the reason in *why
// (a CUDA request without a CUDA build or device is such a failure, never a CPU context).
// family: the CUDA kernel family the context may run (fattn_ctx_set_cuda_family); CPU: AUTO.
fattn_ctx_t *make_ctx(BackendKind b, int nthreads, std::string *why,
                      fattn_cuda_family family = FATTN_CUDA_FAMILY_AUTO);

class DevBuf {
public:
    DevBuf() = default;
    DevBuf(const DevBuf &) = delete;
    DevBuf &operator=(const DevBuf &) = delete;
    ~DevBuf() { release(); }

    bool alloc(BackendKind b, size_t bytes);  // false on failure
    void release();
    void *ptr() const { return ptr_; }
    size_t bytes() const { return bytes_; }
    bool upload(const void *host, size_t bytes, size_t offset = 0);
    bool download(void *host, size_t bytes, size_t offset = 0) const;
    bool poison(size_t from = 0);  // every byte from `from` on = kPoisonByte
    // True if bytes [offset, offset + bytes) equal host (compared in chunks: no full copy).
    bool equals(const void *host, size_t bytes, size_t offset = 0) const;

private:
    BackendKind kind_ = BackendKind::CPU;
    void *ptr_ = nullptr;
    size_t bytes_ = 0;
};

// Wait for the backend's queued work (CUDA: device sync; CPU: nothing).
void backend_sync(BackendKind b);

// The device's whole memory in bytes (CUDA: cudaMemGetInfo's total), 0 where unknown (the CPU):
// a case that needs more than the card has is skipped with the numbers, not failed.
size_t device_total_bytes(BackendKind b);

}  // namespace fattn_test
