// status.cpp — the small, state-free part of the C API: status strings, the version, enum names,
// dtype sizes and the tensor-view constructors. Nothing here touches a context.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/enum_raw.h"
#include "fattn/fattn.h"

#define FATTN_STR2(x) #x
#define FATTN_STR(x) FATTN_STR2(x)

namespace {

// An enum value and its name.
struct Named {
    int64_t value;
    const char *name;
};

// The name of e's value in `names`; `other` for a value none of them has (C callers may pass
// any int).
template <class E, size_t N>
const char *name_of(E e, const Named (&names)[N], const char *other) {
    const int64_t v = fattn::raw_enum(e);
    for (const Named &n : names)
        if (n.value == v) return n.name;
    return other;
}

constexpr Named kStatusNames[] = {
    {FATTN_OK, "ok"},
    {FATTN_ERR_NULL_POINTER, "null pointer"},
    {FATTN_ERR_DTYPE_MISMATCH, "dtype mismatch"},
    {FATTN_ERR_SHAPE_MISMATCH, "shape mismatch"},
    {FATTN_ERR_GQA_HEADS, "query heads not a multiple of key/value heads"},
    {FATTN_ERR_BAD_STRIDE, "bad stride"},
    {FATTN_ERR_OVERLAP, "overlapping tensors"},
    {FATTN_ERR_BAD_BIAS, "bad bias"},
    {FATTN_ERR_BAD_MASK, "bad mask"},
    {FATTN_ERR_BAD_SEQLENS, "bad cu_seqlens"},
    {FATTN_ERR_BAD_HEAD_DIM, "bad head dim"},
    {FATTN_ERR_BAD_VALUE, "bad value"},
    {FATTN_ERR_UNSUPPORTED, "unsupported"},
    {FATTN_ERR_BACKEND_UNAVAILABLE, "backend unavailable"},
    {FATTN_ERR_WORKSPACE_TOO_SMALL, "workspace too small"},
    {FATTN_ERR_OUT_OF_MEMORY, "out of memory"},
    {FATTN_ERR_DEVICE, "device error"},
    {FATTN_ERR_INTERNAL, "internal error"},
};
constexpr Named kDtypeNames[] = {{FATTN_F32, "f32"}, {FATTN_F16, "f16"}, {FATTN_BF16, "bf16"}};
constexpr Named kPrecNames[] = {
    {FATTN_PREC_AUTO, "auto"}, {FATTN_PREC_F32, "f32"}, {FATTN_PREC_TF32, "tf32"}, {FATTN_PREC_NATIVE, "native"},
};
constexpr Named kAlgoNames[] = {{FATTN_ALGO_FUSED, "fused"}, {FATTN_ALGO_EXACT, "exact"}};

}  // namespace

extern "C" {

const char *fattn_status_string(fattn_status s) { return name_of(s, kStatusNames, "unknown status"); }

const char *fattn_version(void) {
    // Built from the header's macros so the string cannot drift from them.
    return FATTN_STR(FATTN_VERSION_MAJOR) "." FATTN_STR(FATTN_VERSION_MINOR) "." FATTN_STR(
        FATTN_VERSION_PATCH);
}

size_t fattn_dtype_size(fattn_dtype t) {
    switch (fattn::raw_enum(t)) {  // C callers may pass any int
    case FATTN_F32: return 4;
    case FATTN_F16:
    case FATTN_BF16: return 2;
    }
    return 0;  // not a dtype: callers validate before relying on the size
}

const char *fattn_dtype_name(fattn_dtype t) { return name_of(t, kDtypeNames, "invalid"); }

const char *fattn_prec_name(fattn_prec p) { return name_of(p, kPrecNames, "invalid"); }

const char *fattn_algo_name(fattn_algo a) { return name_of(a, kAlgoNames, "invalid"); }

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
