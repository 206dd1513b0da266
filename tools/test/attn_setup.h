// attn_setup.h — one softmax-attention case made concrete: host buffers with the inputs (in
// the case's dtype and layout), views into them, and the oracle's answer for them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cpu/ref/attn_ref.h"
#include "test/attn_cases.h"
#include "test/backend_mem.h"

namespace fattn_test {

enum BufId { BUF_Q, BUF_K, BUF_V, BUF_DO, BUF_BIAS, BUF_O, BUF_LSE, BUF_DQ, BUF_DK, BUF_DV, NUM_BUFS };

struct Buf {
    const char *name = "";
    fattn_dtype dt = FATTN_F32;
    int64_t elems = 0;                  // the extent views reach (the guard comes after it)
    bool output = false;
    std::vector<unsigned char> host;    // inputs: the values; outputs: the last download
    std::vector<unsigned char> cover;   // per element: 1 where a view of this buffer lives
    DevBuf dev;
    size_t esz() const { return fattn_dtype_size(dt); }
    size_t bytes() const { return size_t(elems) * esz(); }
};

struct View {
    int buf = -1;
    int64_t off = 0;  // elements from the start of the buffer
    int64_t ne[4] = {0, 0, 0, 0};
    int64_t nb[4] = {0, 0, 0, 0};
    int64_t at(int64_t a, int64_t b, int64_t c, int64_t d) const {
        return off + a * nb[0] + b * nb[1] + c * nb[2] + d * nb[3];
    }
};

struct Inst {
    const AttnCase *c = nullptr;
    int64_t Bv = 0, Sq = 0, Skv = 0;   // view dims (varlen: 1, total_q, total_kv)
    int64_t nseq = 0, max_q = 0, max_kv = 0;
    std::vector<int32_t> cu_q, cu_kv;  // varlen host offsets
    Buf buf[NUM_BUFS];
    View q, k, v, dout, bias, o, lse, dq, dk, dv;
    bool has_bias() const { return bias.buf >= 0; }
};

// Lays out the case and fills its inputs (deterministic per case name).
void setup_inst(const AttnCase &c, Inst *in);

// The oracle's view of the inputs of `in` (host pointers; masks in the normalized form).
fattn::AttnBwdParams ref_params(const Inst &in);

// The oracle on the inputs of `in` (through the gather layer): fwd + bwd into *out; the
// problem and the double tensors too when asked (grad mode).
void run_oracle(const Inst &in, fattn::ref::Outputs *out, fattn::ref::Problem *prob = nullptr,
                fattn::ref::Tensors *t = nullptr);

// Decodes an output view into the oracle's dense layout: [B, S, H, D] tensors, [B, H, S] lse.
std::vector<double> read_view4(const Inst &in, const View &v);
std::vector<double> read_lse(const Inst &in);

}  // namespace fattn_test
