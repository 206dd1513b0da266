// attn_setup.h — one softmax-attention case made concrete: host buffers with the inputs (in
// the case's dtype and layout), views into them, and the oracle's answer for them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cpu/ref/attn_ref.h"
#include "test/attn_cases.h"
#include "test/backend_mem.h"
#include "test/host_par.h"

namespace fattn_test {

enum BufId { BUF_Q, BUF_K, BUF_V, BUF_DO, BUF_BIAS, BUF_O, BUF_LSE, BUF_DQ, BUF_DK, BUF_DV, BUF_DBIAS, NUM_BUFS };

// Bytes after every output, workspace and saved buffer (and every device input) that must keep
// the poison byte.
constexpr size_t kGuardBytes = 256;

struct View {
    int buf = -1;
    int64_t off = 0;  // elements from the start of the buffer
    int64_t ne[4] = {0, 0, 0, 0};
    int64_t nb[4] = {0, 0, 0, 0};
    int64_t at(int64_t a, int64_t b, int64_t c, int64_t d) const {
        return off + a * nb[0] + b * nb[1] + c * nb[2] + d * nb[3];
    }
    int64_t size() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    // True when the view is a permutation of exactly the elements [off, off + size()).
    bool compact() const;
};

// f(a, b, c, d, element) for every cell of v, in logical order.
template <class F>
void for_each4(const View &v, F &&f) {
    for (int64_t a = 0; a < v.ne[0]; ++a)
        for (int64_t b = 0; b < v.ne[1]; ++b)
            for (int64_t c = 0; c < v.ne[2]; ++c)
                for (int64_t d = 0; d < v.ne[3]; ++d) f(a, b, c, d, v.at(a, b, c, d));
}

struct Buf {
    const char *name = "";
    fattn_dtype dt = FATTN_F32;
    int64_t elems = 0;                  // the extent views reach (the guard comes after it)
    bool output = false;
    HostBytes host;                     // inputs: the values; outputs: the last download (+ guard)
    // Which elements views cover: all of them when `dense` (one compact view spanning the
    // buffer: no per-element map); else a bit per element in cover_bits.
    std::vector<View> views;
    bool dense = false;
    std::vector<uint64_t> cover_bits;
    int64_t n_inf = 0;                  // covered cells that came back +-inf (set by run_lib)
    DevBuf dev;
    size_t esz() const { return fattn_dtype_size(dt); }
    size_t bytes() const { return size_t(elems) * esz(); }
    bool covered(int64_t e) const { return dense || ((cover_bits[size_t(e >> 6)] >> (e & 63)) & 1u); }
};

struct Inst {
    const AttnCase *c = nullptr;
    int64_t Bv = 0, Sq = 0, Skv = 0;   // view dims (varlen: 1, total_q, total_kv)
    int64_t nseq = 0, max_q = 0, max_kv = 0;
    std::vector<int32_t> cu_q, cu_kv;  // varlen host offsets
    Buf buf[NUM_BUFS];
    View q, k, v, dout, bias, o, lse, dq, dk, dv;
    View dbias;  // cases that want dbias: f32 [B|1, Hq|1, Sq|1, Skv], 1 where bias steps by 0
    bool has_bias() const { return bias.buf >= 0; }
    bool wants_dbias() const { return dbias.buf >= 0; }
};

// Lays out the case and fills its inputs (deterministic per case name; the same values whatever
// the number of host threads).
void setup_inst(const AttnCase &c, Inst *in);

// The oracle's view of the inputs of `in` (host pointers; masks in the normalized form).
fattn::AttnBwdParams ref_params(const Inst &in);

// The oracle on the inputs of `in` (through the gather layer): fwd + bwd into *out (with
// out->dbias reduced to the dbias view's shape when the case wants dbias); the problem and
// the double tensors too when asked (grad mode).
void run_oracle(const Inst &in, fattn::ref::Outputs *out, fattn::ref::Problem *prob = nullptr,
                fattn::ref::Tensors *t = nullptr);

// Decodes an output view into the oracle's dense layout: [B, S, H, D] tensors, [B, H, S] lse.
std::vector<double> read_view4(const Inst &in, const View &v);
std::vector<double> read_lse(const Inst &in);

}  // namespace fattn_test
