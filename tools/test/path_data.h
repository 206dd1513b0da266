// path_data.h — test data of the PaTH checks (fattn-test's and the unit tests'): one tensor's
// storage in its dtype beside the double values an oracle sees (set() rounds through the dtype,
// read() takes the written values back), the unit vectors w is made of, and normal fills (also
// fattn-bench's PaTH arm).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "fattn/fattn.h"

namespace fattn_test {

struct TypedBuf {
    fattn_dtype dt = FATTN_F32;
    std::vector<uint8_t> bytes;
    std::vector<double> val;  // the rounded values (inputs) or the read-back values (outputs)
    void alloc(fattn_dtype t, int64_t n) {
        dt = t;
        bytes.assign(size_t(n) * fattn_dtype_size(t), 0xFF);  // NaN in every dtype
        val.assign(size_t(n), 0.0);
    }
    void set(int64_t i, double x) {
        fattn::store_f32(bytes.data(), dt, i, float(x));
        val[size_t(i)] = fattn::load_f32(bytes.data(), dt, i);
    }
    void read() {
        for (size_t i = 0; i < val.size(); ++i) val[i] = fattn::load_f32(bytes.data(), dt, int64_t(i));
    }
    fattn_tensor view(int64_t a, int64_t b, int64_t c, int64_t d) {
        return fattn_tensor_contiguous(bytes.data(), dt, a, b, c, d);
    }
};

// K normal draws scaled to length 1 (the draws first, in order: a caller's later draws follow).
template <class Rng>
std::vector<double> unit_vector(int64_t K, Rng &rng, std::normal_distribution<double> &nd) {
    std::vector<double> x(static_cast<size_t>(K));
    double n = 0;
    for (auto &e : x) {  // assign, then use: (e = ..) * e is unsequenced (clang -Wunsequenced)
        e = nd(rng);
        n += e * e;
    }
    for (auto &e : x) e = e / std::sqrt(n);
    return x;
}

// n normal draws stored in dtype t from element 0 of base.
template <class Rng>
void fill_normal(void *base, fattn_dtype t, int64_t n, Rng &rng, std::normal_distribution<float> &nd) {
    for (int64_t i = 0; i < n; ++i) fattn::store_f32(base, t, i, nd(rng));
}

// One f32 row of w: K normal draws scaled to length 1 in f32.
template <class Rng>
void unit_row(float *w, int64_t K, Rng &rng, std::normal_distribution<float> &nd) {
    float n = 0;
    for (int64_t d = 0; d < K; ++d) {
        w[d] = nd(rng);
        n += w[d] * w[d];
    }
    for (int64_t d = 0; d < K; ++d) w[d] /= std::sqrt(n);
}

}  // namespace fattn_test
