// status.cpp — the small, state-free part of the C API: status strings, the version, enum names,
// dtype sizes and the tensor-view constructors. Nothing here touches a context.
#include <cstring>

#include "core/enum_raw.h"
#include "fattn/fattn.h"

#define FATTN_STR2(x) #x
#define FATTN_STR(x) FATTN_STR2(x)

extern "C" {

const char *fattn_status_string(fattn_status s) {
    switch (fattn::raw_enum(s)) {  // C callers may pass any int
    case FATTN_OK: return "ok";
    case FATTN_ERR_NULL_POINTER: return "null pointer";
    case FATTN_ERR_DTYPE_MISMATCH: return "dtype mismatch";
    case FATTN_ERR_SHAPE_MISMATCH: return "shape mismatch";
    case FATTN_ERR_GQA_HEADS: return "query heads not a multiple of key/value heads";
    case FATTN_ERR_BAD_STRIDE: return "bad stride";
    case FATTN_ERR_OVERLAP: return "overlapping tensors";
    case FATTN_ERR_BAD_BIAS: return "bad bias";
    case FATTN_ERR_BAD_MASK: return "bad mask";
    case FATTN_ERR_BAD_SEQLENS: return "bad cu_seqlens";
    case FATTN_ERR_BAD_HEAD_DIM: return "bad head dim";
    case FATTN_ERR_BAD_VALUE: return "bad value";
    case FATTN_ERR_UNSUPPORTED: return "unsupported";
    case FATTN_ERR_BACKEND_UNAVAILABLE: return "backend unavailable";
    case FATTN_ERR_WORKSPACE_TOO_SMALL: return "workspace too small";
    case FATTN_ERR_OUT_OF_MEMORY: return "out of memory";
    case FATTN_ERR_DEVICE: return "device error";
    case FATTN_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *fattn_version(void) {
    // Built from the header's macros so the string cannot drift from them.
    return FATTN_STR(FATTN_VERSION_MAJOR) "." FATTN_STR(FATTN_VERSION_MINOR) "." FATTN_STR(
        FATTN_VERSION_PATCH);
}

size_t fattn_dtype_size(fattn_dtype t) {
    switch (fattn::raw_enum(t)) {  // C callers may pass any int
    case FATTN_F32: return 4;
    case FATTN_F16: return 2;
    case FATTN_BF16: return 2;
    }
    return 0;  // not a dtype: callers validate before relying on the size
}

const char *fattn_dtype_name(fattn_dtype t) {
    switch (fattn::raw_enum(t)) {  // C callers may pass any int
    case FATTN_F32: return "f32";
    case FATTN_F16: return "f16";
    case FATTN_BF16: return "bf16";
    }
    return "invalid";
}

const char *fattn_prec_name(fattn_prec p) {
    switch (fattn::raw_enum(p)) {  // C callers may pass any int
    case FATTN_PREC_AUTO: return "auto";
    case FATTN_PREC_F32: return "f32";
    case FATTN_PREC_TF32: return "tf32";
    case FATTN_PREC_NATIVE: return "native";
    }
    return "invalid";
}

const char *fattn_algo_name(fattn_algo a) {
    switch (fattn::raw_enum(a)) {  // C callers may pass any int
    case FATTN_ALGO_FUSED: return "fused";
    case FATTN_ALGO_EXACT: return "exact";
    }
    return "invalid";
}

fattn_tensor fattn_tensor_4d(void *data, fattn_dtype dtype, int64_t n0, int64_t n1, int64_t n2,
                             int64_t n3, int64_t s0, int64_t s1, int64_t s2, int64_t s3) {
    fattn_tensor t;
    t.data = data;
    // Copied as bytes: a C caller may pass any int, and loading an out-of-range value as the
    // enum type is undefined in C++; the validators report it (BAD_VALUE) when the view is used.
    std::memcpy(&t.dtype, &dtype, sizeof t.dtype);
    t.ne[0] = n0; t.ne[1] = n1; t.ne[2] = n2; t.ne[3] = n3;
    t.nb[0] = s0; t.nb[1] = s1; t.nb[2] = s2; t.nb[3] = s3;
    return t;
}

fattn_tensor fattn_tensor_contiguous(void *data, fattn_dtype dtype, int64_t n0, int64_t n1,
                                     int64_t n2, int64_t n3) {
    // Row-major over [n0, n1, n2, n3]; strides in elements. The products wrap (unsigned, so
    // defined) for absurd dims; such a view is refused by the validators' size checks.
    const uint64_t s2 = uint64_t(n3), s1 = s2 * uint64_t(n2), s0 = s1 * uint64_t(n1);
    fattn_tensor t = fattn_tensor_4d(data, FATTN_F32, n0, n1, n2, n3, int64_t(s0), int64_t(s1),
                                     int64_t(s2), 1);
    std::memcpy(&t.dtype, &dtype, sizeof t.dtype);  // as bytes: see fattn_tensor_4d
    return t;
}

fattn_tensor fattn_tensor_none(void) {
    return fattn_tensor_4d(nullptr, FATTN_F32, 0, 0, 0, 0, 0, 0, 0, 0);
}

}  // extern "C"
