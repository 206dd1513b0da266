// fattn_fuzz.cpp — fuzz target for the support surface of both families: the validators and
// every size query (supports, workspace_size, saved_size, memory, max_seqlen), plus fwd/bwd of
// problems small enough to run, with every view inside one arena so AddressSanitizer sees any
// byte the library touches outside what it was given.
//
// Input bytes decode into one call: params, views (dims from a table of edge values: 0, 1, odd
// sizes, 2^31, 2^58, 2^62, INT64_MAX, negatives; strides natural, 0, 1, huge or negative;
// dtypes in and out of range; data NULL, aligned or not, overlapping on purpose). Invariants
// checked (a violation traps, which the fuzzer reports as a crash):
//   - every status is a fattn_status; a failure leaves a non-empty message;
//   - size answers never contradict each other: memory() workspaces >= workspace_size(), peaks
//     >= their parts, PaTH history <= total; supports OK <=> the size queries OK;
//   - nothing crashes, reads or writes out of bounds, or hits undefined behaviour (ASan/UBSan).
//
// Built two ways (tests/fuzz/CMakeLists.txt): with clang's libFuzzer as fattn-fuzz
// (-DFATTN_FUZZ=ON; CI runs a short smoke), and with any compiler as fattn-fuzz-replay, which
// feeds it a fixed pseudo-random stream or given files (a ctest, so the ASan/UBSan build runs it).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/attn_validate.h"
#include "fattn/fattn.h"

extern "C" {  // raw_enum_calls.c
fattn_status fattn_fuzz_workspace_raw_dir(fattn_ctx_t *ctx, const fattn_attn_params *p, const fattn_tensor *q,
                                          const fattn_tensor *k, const fattn_tensor *v, int dir, size_t *bytes);
fattn_status fattn_fuzz_max_seqlen_raw_dtype(fattn_ctx_t *ctx, const fattn_attn_params *p, int dtype, int64_t B,
                                             int64_t Hq, int64_t Hkv, int64_t D, int64_t Dv, uint64_t budget,
                                             int64_t *max_s);
}

namespace {

constexpr size_t kArenaFloats = 1 << 16;  // 256 KiB: every view with data lives in here
alignas(64) float g_arena[kArenaFloats];

// How far the inputs got (printed by the replay driver, so a smoke that validates nothing shows).
struct Stats {
    long calls = 0, accepted = 0, runs = 0, dbias_runs = 0;
} g_stats;

[[noreturn]] void violated(const char *what) {
    std::fprintf(stderr, "fattn-fuzz: invariant violated: %s\n", what);
    std::abort();
}
#define FUZZ_CHECK(cond) \
    do {                 \
        if (!(cond)) violated(#cond); \
    } while (0)

struct Reader {
    const uint8_t *d;
    size_t n, i = 0;
    uint8_t u8() { return i < n ? d[i++] : 0; }
    uint32_t u32() { return uint32_t(u8()) | uint32_t(u8()) << 8 | uint32_t(u8()) << 16 | uint32_t(u8()) << 24; }
    // Mostly small sizes (the runnable cases), sometimes an edge value.
    int64_t dim() {
        static const int64_t edge[] = {0, -1, -5, 17, 97, 257, 1025, int64_t(1) << 31, (int64_t(1) << 31) - 1,
                                       int64_t(1) << 40, int64_t(1) << 58, int64_t(1) << 62, INT64_MAX,
                                       INT64_MIN, 512, 513};
        const uint8_t b = u8();
        return b < 200 ? 1 + b % 9 : edge[b % 16];
    }
    int64_t stride(int64_t natural) {
        const uint8_t b = u8();
        if (b < 232) return natural;
        static const int64_t odd[] = {0, 1, 2, -1, 3, 16, int64_t(1) << 62, INT64_MAX};
        return b < 250 ? odd[b % 8] : int64_t(uint64_t(natural) + (b & 3));  // may wrap: any int64 is a view
    }
};

void *data_ptr(Reader &r, size_t need_bytes) {
    const uint8_t b = r.u8();
    if (b < 6) return nullptr;
    // An offset into the arena; views may share it (overlap) or be misaligned (b odd).
    size_t off = size_t(r.u32() % (kArenaFloats * 4));
    if (b < 248) off &= ~size_t(3);
    if (need_bytes < kArenaFloats * 4 && off + need_bytes > kArenaFloats * 4) off = 0;
    return reinterpret_cast<char *>(g_arena) + off;
}

void set_dtype(Reader &r, fattn_dtype *dt, int base) {
    const uint8_t b = r.u8();
    int v = b < 250 ? base : (b % 4 == 0 ? 3 : b % 4 == 1 ? 7 : b % 4 == 2 ? -1 : 0x7fffffff);
    std::memcpy(dt, &v, sizeof v);  // as a C caller would; never formed as the C++ enum
}

// A [n0, n1, n2, n3] view: contiguous strides, perturbed; data from the arena or NULL.
fattn_tensor view(Reader &r, int dtype, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    fattn_tensor t = fattn_tensor_contiguous(nullptr, FATTN_F32, n0, n1, n2, n3);
    set_dtype(r, &t.dtype, dtype);
    for (int d = 0; d < 4; ++d) t.nb[d] = r.stride(t.nb[d]);
    unsigned __int128 span = 4;
    for (int d = 0; d < 4; ++d)
        if (t.ne[d] > 0 && t.nb[d] > 0) span += (unsigned __int128)(t.ne[d] - 1) * uint64_t(t.nb[d]) * 4;
    t.data = data_ptr(r, span > kArenaFloats * 4 ? SIZE_MAX : size_t(span));
    return t;
}

// Is every byte the view can address inside the arena? Only then may a kernel run on it.
bool in_arena(const fattn_tensor &t) {
    if (!t.data) return false;
    const char *a = reinterpret_cast<const char *>(g_arena), *p = static_cast<const char *>(t.data);
    unsigned __int128 last = 0;
    for (int d = 0; d < 4; ++d) {
        if (t.ne[d] <= 0) return true;  // empty: addresses nothing
        if (t.nb[d] < 0) return false;
        last += (unsigned __int128)(t.ne[d] - 1) * uint64_t(t.nb[d]);
    }
    int raw;  // the dtype field may hold any int: read it as one, never as the enum
    std::memcpy(&raw, &t.dtype, sizeof raw);
    const size_t es = raw == FATTN_F32 ? 4 : raw == FATTN_F16 || raw == FATTN_BF16 ? 2 : 0;
    return es && p >= a && (unsigned __int128)(p - a) + (last + 1) * es <= sizeof g_arena;
}

fattn_ctx_t *ctx() {
    static fattn_ctx_t *c = [] {
        fattn_ctx_t *x = nullptr;
        if (fattn_ctx_init_cpu(2, &x) != FATTN_OK) violated("ctx init");
        return x;
    }();
    return c;
}

// api: the status of a C API call, whose failure must leave ctx's last error set (the internal
// validator returns its message in `why` instead).
void check_status(fattn_status s, bool api = true) {
    ++g_stats.calls;
    if (s == FATTN_OK) ++g_stats.accepted;
    int v;
    std::memcpy(&v, &s, sizeof v);
    FUZZ_CHECK(v >= FATTN_OK && v <= FATTN_ERR_INTERNAL);
    if (s != FATTN_OK && api) FUZZ_CHECK(fattn_ctx_last_error(ctx())[0] != '\0');
}

void fuzz_attn(Reader &r, uint8_t op) {
    fattn_attn_params p = fattn_attn_params_default();
    const uint8_t flags = r.u8();
    if (flags & 1) p.causal = FATTN_CAUSAL_BOTTOM_RIGHT;
    if (flags & 2) p.window_left = r.dim(), p.window_right = (flags & 4) ? 0 : -1;
    if (flags & 8) p.algo = FATTN_ALGO_EXACT;
    if (flags & 16) p.scale = float(r.u8()) / 16.f;
    if (flags & 32) set_dtype(r, reinterpret_cast<fattn_dtype *>(&p.prec), 1);  // a raw enum field
    const int dt = r.u8() % 3;
    const int64_t B = r.dim(), Sq = r.dim(), Skv = r.dim(), Hkv = r.dim(), G = r.dim() % 3 + 1;
    const int64_t D = r.dim(), Dv = r.dim(), Hq = int64_t(uint64_t(Hkv) * uint64_t(G));  // may wrap: fine
    fattn_tensor q = view(r, dt, B, Sq, Hq, D), k = view(r, dt, B, Skv, Hkv, D), v = view(r, dt, B, Skv, Hkv, Dv);
    int32_t cu[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
    if (flags & 64) {  // varlen: 1..3 sequences cut from the token dims
        p.num_seqs = 1 + r.u8() % 3;
        for (int s = 1; s <= p.num_seqs; ++s) {
            cu[0][s] = s == p.num_seqs ? int32_t(Sq) : cu[0][s - 1] + r.u8() % 4;
            cu[1][s] = s == p.num_seqs ? int32_t(Skv) : cu[1][s - 1] + r.u8() % 4;
        }
        p.cu_seqlens_q = cu[0];
        p.cu_seqlens_kv = cu[1];
        if (r.u8() > 240) p.cu_seqlens_q = static_cast<const int32_t *>(data_ptr(r, 16));  // maybe in an output
    }
    if (flags & 128) p.bias = view(r, r.u8() % 3, r.u8() & 1 ? 1 : B, r.u8() & 1 ? 1 : Hq, Sq, Skv);
    fattn_ctx_t *c = ctx();
    switch (op % 6) {
    case 0: {  // supports <=> every size query answers
        const fattn_status s = fattn_attn_supports(c, &p, &q, &k, &v, nullptr, 0);
        check_status(s);
        size_t wf = 0, wb = 0, sv = 0;
        fattn_attn_memory_info m;
        const fattn_status sf = fattn_attn_workspace_size(c, &p, &q, &k, &v, FATTN_DIR_FWD, &wf);
        const fattn_status sb = fattn_attn_workspace_size(c, &p, &q, &k, &v, FATTN_DIR_BWD, &wb);
        const fattn_status ss = fattn_attn_saved_size(c, &p, &q, &k, &v, &sv);
        const fattn_status sm = fattn_attn_memory(c, &p, &q, &k, &v, &m);
        FUZZ_CHECK(sf == s && sb == s && ss == s && sm == s);
        if (s == FATTN_OK) {
            FUZZ_CHECK(m.fwd_workspace_bytes >= wf && m.bwd_workspace_bytes >= wb);
            FUZZ_CHECK(m.saved_bytes >= sv);
            FUZZ_CHECK(m.fwd_peak_bytes >= m.inputs_bytes && m.fwd_peak_bytes >= m.saved_bytes &&
                       m.fwd_peak_bytes >= m.fwd_workspace_bytes);
            FUZZ_CHECK(m.bwd_peak_bytes >= m.grads_bytes && m.bwd_peak_bytes >= m.bwd_workspace_bytes);
        }
        // The _ex queries with a request mask (read last: older inputs decode as before, want 0):
        // they agree with each other; want 0 is the plain answer; the dbias bit only adds rules
        // (on the CPU, exactly "there is a bias") and bytes (dbias counted, no workspace).
        const uint8_t wsel = r.u8();
        const uint32_t want = wsel < 128 ? 0u : wsel < 250 ? FATTN_ATTN_WANT_DBIAS : r.u32();
        const fattn_status sx = fattn_attn_supports_ex(c, &p, &q, &k, &v, want, nullptr, 0);
        check_status(sx);
        size_t wfx = 0, wbx = 0;
        fattn_attn_memory_info mx{};
        const fattn_status sfx = fattn_attn_workspace_size_ex(c, &p, &q, &k, &v, want, FATTN_DIR_FWD, &wfx);
        const fattn_status sbx = fattn_attn_workspace_size_ex(c, &p, &q, &k, &v, want, FATTN_DIR_BWD, &wbx);
        const fattn_status smx = fattn_attn_memory_ex(c, &p, &q, &k, &v, want, &mx);
        FUZZ_CHECK(sfx == sx && sbx == sx && smx == sx);
        if (want == 0) FUZZ_CHECK(sx == s);
        if (want & ~uint32_t(FATTN_ATTN_WANT_DBIAS)) FUZZ_CHECK(sx != FATTN_OK);
        if (want == FATTN_ATTN_WANT_DBIAS && s == FATTN_OK)
            FUZZ_CHECK(p.bias.data ? sx == FATTN_OK : sx == FATTN_ERR_BAD_BIAS);
        if (sx == FATTN_OK) {
            FUZZ_CHECK(s == FATTN_OK && wfx == wf && wbx == wb);
            FUZZ_CHECK(mx.grads_bytes >= m.grads_bytes && mx.bwd_peak_bytes >= m.bwd_peak_bytes &&
                       mx.fwd_peak_bytes == m.fwd_peak_bytes && mx.inputs_bytes == m.inputs_bytes);
            if (want == 0) FUZZ_CHECK(std::memcmp(&mx, &m, sizeof m) == 0);
        }
        return;
    }
    case 1: {  // raw dir values
        size_t w = 0;
        const int dir = r.u8() < 240 ? r.u8() & 1 : int(r.u32());
        check_status(fattn_fuzz_workspace_raw_dir(c, &p, &q, &k, &v, dir, &w));
        return;
    }
    case 2: {
        int64_t s = -1;
        const int d = r.u8() < 240 ? dt : int(r.u32());
        const fattn_status st =
            fattn_fuzz_max_seqlen_raw_dtype(c, &p, d, B, Hq, Hkv, D, Dv, uint64_t(r.u32()) << (r.u8() % 32), &s);
        check_status(st);
        FUZZ_CHECK(s >= 0);
        return;
    }
    default: {  // fwd / bwd: the validator on outputs, then a run if everything is small and in the arena
        fattn_tensor o = view(r, dt, B, Sq, Hq, Dv), lse = view(r, 0, B, Hq, Sq, 1);
        lse.nb[3] = 1;
        fattn_tensor dout = view(r, dt, B, Sq, Hq, Dv), dq = view(r, dt, B, Sq, Hq, D);
        fattn_tensor dk = view(r, dt, B, Skv, Hkv, D), dv = view(r, dt, B, Skv, Hkv, Dv);
        const bool bwd = op & 1;
        fattn::AttnViews vw;
        vw.q = &q, vw.k = &k, vw.v = &v, vw.o = &o, vw.lse = &lse;
        if (bwd) vw.dout = &dout, vw.dq = &dq, vw.dk = &dk, vw.dv = &dv;
        // A backward's dbias (read last: older inputs decode as before, without one): mostly the
        // bias's reduced shape (1 where it steps by 0), sometimes an edge value per dim.
        fattn_tensor dbias = fattn_tensor_none();
        if (bwd && (r.u8() & 1)) {
            const int64_t full[3] = {B, Hq, Sq};
            int64_t ne[3];
            for (int d = 0; d < 3; ++d) {
                const bool bcast = p.bias.data && (p.bias.ne[d] == 1 || p.bias.nb[d] == 0);
                ne[d] = r.u8() < 240 ? (bcast ? 1 : full[d]) : r.dim();
            }
            dbias = view(r, 0, ne[0], ne[1], ne[2], r.u8() < 240 ? Skv : r.dim());
            vw.dbias = &dbias;
        }
        fattn::AttnResolved res;
        std::string why;
        const fattn_status s = fattn::attn_validate(c, &p, bwd ? fattn::AttnOp::BWD : fattn::AttnOp::FWD, vw,
                                                    true, &res, &why);
        check_status(s, /*api=*/false);
        if (s != FATTN_OK) FUZZ_CHECK(!why.empty());
        const fattn_tensor *all[] = {&q, &k, &v, &o, &lse, &dout, &dq, &dk, &dv};
        bool runnable = s == FATTN_OK && (!p.bias.data || in_arena(p.bias)) && (!dbias.data || in_arena(dbias));
        for (const fattn_tensor *t : all) runnable = runnable && in_arena(*t);
        // Work in double: broadcast inputs may carry dims whose int64 product overflows.
        runnable = runnable && double(B) * double(Hq) * double(Sq) * double(Skv) * (double(D) + double(Dv)) <= 16384.0 &&
                   p.algo == FATTN_ALGO_FUSED;
        if (!runnable) return;
        const fattn_status run =
            bwd ? fattn_attn_bwd_ex(c, &p, &q, &k, &v, &o, &lse, nullptr, &dout, &dq, &dk, &dv, &dbias, nullptr, 0)
                : fattn_attn_fwd(c, &p, &q, &k, &v, &o, &lse, nullptr, nullptr, 0);
        ++g_stats.runs;
        g_stats.dbias_runs += dbias.data != nullptr;
        check_status(run);
        FUZZ_CHECK(run == FATTN_OK);  // validated means it runs
        return;
    }
    }
}

void fuzz_path(Reader &r, uint8_t op) {
    fattn_path_params p = fattn_path_params_default();
    p.check = FATTN_PATH_CHECK_NONE;  // values are arbitrary here
    const uint8_t flags = r.u8();
    if (flags & 1) p.history = FATTN_PATH_HISTORY_RECTANGULAR;
    if (flags & 2) set_dtype(r, reinterpret_cast<fattn_dtype *>(&p.history), 0);
    const int dt = r.u8() % 3;
    const int64_t B = r.dim(), T = r.dim(), H = r.dim(), G = r.dim() % 3 + 1;
    const int64_t K = (flags & 4) ? r.dim() : 16, V = (flags & 8) ? r.dim() : 16;
    const int64_t HQ = int64_t(uint64_t(H) * uint64_t(G));  // may wrap: fine, a view of any dims
    fattn_tensor q = view(r, dt, B, T, HQ, K), k = view(r, dt, B, T, H, K), v = view(r, dt, B, T, H, V);
    fattn_tensor w = view(r, 0, B, T, H, K), beta = view(r, 0, B, T, H, 1);
    fattn_tensor g = (flags & 16) ? view(r, 0, B, T, HQ, 1) : fattn_tensor_none();
    int32_t cu[4] = {0, 0, 0, 0};
    if (flags & 32) {
        p.num_seqs = 1 + r.u8() % 3;
        for (int s = 1; s <= p.num_seqs; ++s) cu[s] = s == p.num_seqs ? int32_t(T) : cu[s - 1] + r.u8() % 40;
        p.cu_seqlens = cu;
    }
    fattn_ctx_t *c = ctx();
    if (op % 3 != 2) {
        const fattn_status s = fattn_path_supports(c, &p, &q, &k, &v, &w, &beta, &g, nullptr, 0);
        check_status(s);
        fattn_path_workspace_info wf, wb;
        fattn_path_memory_info m;
        const fattn_status sf = fattn_path_workspace_size(c, &p, &q, &k, &v, &w, &beta, &g, FATTN_DIR_FWD, &wf);
        const fattn_status sb = fattn_path_workspace_size(c, &p, &q, &k, &v, &w, &beta, &g, FATTN_DIR_BWD, &wb);
        const fattn_status sm = fattn_path_memory(c, &p, &q, &k, &v, &w, &beta, &g, &m);
        FUZZ_CHECK(sf == s && sb == s && sm == s);
        if (s != FATTN_OK) return;
        FUZZ_CHECK(wb.history_bytes <= wb.total_bytes);
        FUZZ_CHECK(m.fwd_workspace_bytes >= wf.total_bytes && m.bwd_workspace_bytes >= wb.total_bytes);
        FUZZ_CHECK(m.history_packed_bytes <= m.bwd_workspace_bytes || p.history != FATTN_PATH_HISTORY_PACKED);
        FUZZ_CHECK(m.bwd_peak_bytes >= m.bwd_workspace_bytes && m.bwd_peak_bytes >= m.grads_bytes);
        return;
    }
    fattn_tensor o = view(r, dt, B, T, HQ, V), lse = view(r, 0, B, HQ, T, 1);
    fattn_tensor dout = view(r, dt, B, T, HQ, V), dq = view(r, dt, B, T, HQ, K), dk = view(r, dt, B, T, H, K);
    fattn_tensor dv = view(r, dt, B, T, H, V), dw = view(r, 0, B, T, H, K), db = view(r, 0, B, T, H, 1);
    fattn_tensor dg = (flags & 16) ? view(r, 0, B, T, HQ, 1) : fattn_tensor_none();
    const fattn_tensor *all[] = {&q, &k, &v, &w, &beta, &o, &lse, &dout, &dq, &dk, &dv, &dw, &db};
    // Validation alone cannot be reached without running: only tiny problems in the arena go.
    bool runnable = double(T) * double(B) * double(HQ) <= 256.0 && (!(flags & 16) || (in_arena(g) && in_arena(dg)));
    for (const fattn_tensor *t : all) runnable = runnable && in_arena(*t);
    if (!runnable) return;
    ++g_stats.runs;
    check_status(fattn_path_fwd(c, &p, &q, &k, &v, &w, &beta, &g, &o, &lse, nullptr, 0));
    check_status(fattn_path_bwd(c, &p, &q, &k, &v, &w, &beta, &g, &o, &lse, &dout, &dq, &dk, &dv, &dw, &db, &dg,
                                nullptr, 0));
}

}  // namespace

extern "C" void fattn_fuzz_stats(long *calls, long *accepted, long *runs, long *dbias_runs) {
    *calls = g_stats.calls, *accepted = g_stats.accepted, *runs = g_stats.runs, *dbias_runs = g_stats.dbias_runs;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Reader r{data, size};
    const uint8_t op = r.u8();
    if (op & 0x80)
        fuzz_path(r, op);
    else
        fuzz_attn(r, op);
    return 0;
}
