// typed_buf.h — one tensor's storage in its dtype beside the double values an oracle sees: set()
// rounds through the dtype, read() takes the written values back (the PaTH checks of fattn-test
// and of the unit tests).
#pragma once

#include <cstdint>
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

}  // namespace fattn_test
