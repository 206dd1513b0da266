// dtype.h — scalar conversions between the storage dtypes (f32, f16, bf16) and float/double.
// Host-side, header-only, no dependencies. Used by every CPU kernel, the oracles and the tools.
// Rounding: float -> f16/bf16 is round-to-nearest-even; NaN stays NaN, overflow goes to inf.
#pragma once

#include <cstdint>
#include <cstring>

#include "fattn/fattn.h"

namespace fattn {

// A float's bits and back (memcpy: no aliasing rule broken).
inline uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float f32_from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
    const uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);                           // nearest-even
    return uint16_t((u + rounding) >> 16);
}

inline float f16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else {  // subnormal: normalize
            int e = -1;
            do {
                man <<= 1;
                ++e;
            } while ((man & 0x400u) == 0);
            u = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | man << 13;
    } else {
        u = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    return f32_from_bits(u);
}

inline uint16_t f32_to_f16(float f) {
    const uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
    if (absu >= 0x477ff000u) return uint16_t(sign | 0x7c00u); // rounds to >= 65520: inf
    if (absu < 0x38800000u) {                                 // result subnormal or zero
        // value = absu as float; f16 subnormal unit is 2^-24
        const float af = f32_from_bits(absu);
        // round-to-nearest-even via float arithmetic on the scaled value
        float scaled = af * 16777216.0f;  // 2^24, exact
        uint32_t r = uint32_t(scaled);
        float rem = scaled - float(r);
        if (rem > 0.5f || (rem == 0.5f && (r & 1u))) ++r;
        return uint16_t(sign | r);
    }
    uint32_t exp = ((absu >> 23) - 127 + 15);
    uint32_t man = absu & 0x7fffffu;
    uint32_t h = (exp << 10) | (man >> 13);
    uint32_t rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into exponent: fine
    return uint16_t(sign | h);
}

// Load element i (element offset) of a buffer of dtype t as float.
inline float load_f32(const void *base, fattn_dtype t, int64_t i) {
    switch (t) {
    case FATTN_F32: return static_cast<const float *>(base)[i];
    case FATTN_F16: return f16_to_f32(static_cast<const uint16_t *>(base)[i]);
    case FATTN_BF16: return bf16_to_f32(static_cast<const uint16_t *>(base)[i]);
    }
    return 0.0f;
}

inline void store_f32(void *base, fattn_dtype t, int64_t i, float x) {
    switch (t) {
    case FATTN_F32: static_cast<float *>(base)[i] = x; return;
    case FATTN_F16: static_cast<uint16_t *>(base)[i] = f32_to_f16(x); return;
    case FATTN_BF16: static_cast<uint16_t *>(base)[i] = f32_to_bf16(x); return;
    }
}

// Round a float to what storing it in dtype t and loading it back gives.
inline float round_to(fattn_dtype t, float x) {
    switch (t) {
    case FATTN_F32: return x;
    case FATTN_F16: return f16_to_f32(f32_to_f16(x));
    case FATTN_BF16: return bf16_to_f32(f32_to_bf16(x));
    }
    return x;
}

}  // namespace fattn
