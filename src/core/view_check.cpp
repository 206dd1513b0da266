// view_check.cpp — the view rules shared by both families' support surfaces (see view_check.h).
//
// All size arithmetic here is 128-bit: a view's dims and strides are arbitrary int64 values from
// the caller, and a product that wraps (2 × 2^62 × 16 elements "= 0") is how a NULL output
// passed for a huge view once reached a kernel.
#include "core/view_check.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/enum_raw.h"

namespace fattn::vc {

const char *const kDimNames[4] = {"batch", "seq", "heads", "head dim"};
const char *const kLseDimNames[4] = {"batch", "heads", "seq", "unit"};

namespace {

using i128 = __int128;
using std::string;

string S(int64_t x) { return std::to_string(x); }

constexpr i128 kMaxBytes = i128(INT64_MAX);  // every byte offset must fit an int64

fattn_status fail(std::string *why, fattn_status s, string msg) {
    *why = std::move(msg);
    return s;
}

i128 elems128(const fattn_tensor &t) {
    for (int d = 0; d < 4; ++d)
        if (t.ne[d] <= 0) return 0;  // empty, whatever the other dims (an empty view is legal)
    i128 n = 1;
    for (int d = 0; d < 4; ++d) {
        n *= i128(t.ne[d]);
        if (n > kMaxBytes) return kMaxBytes + 1;  // saturate: only "too large" matters past here
    }
    return n;
}

string dims_str(std::initializer_list<int64_t> ne) {
    string s = "[";
    for (int64_t x : ne) s += (s.size() > 1 ? ", " : "") + S(x);
    return s + "]";
}

// ---------------------------------------------------------------- overlap
//
// Two views overlap iff some element of one shares a byte with some element of the other. Exact
// test for equal element size: with δ the base difference (in elements), they overlap iff
// δ = Σ_d i_d·nbA_d − Σ_d j_d·nbB_d for some in-range indices i, j. A dim with the same stride in
// both views becomes one digit t_d = i_d − j_d in [−(neB_d−1), neA_d−1]; a dim whose strides differ
// (q, k, v or dq, dk, dv as views of one fused buffer with D != Dv) becomes two digits, one per view.
// Searched digit by digit from the largest stride inward; each level keeps only the t that the
// inner digits can still compensate (at most 2 candidates for nested strides). A pathological
// layout that blows the search budget is reported as overlapping: never a false "no".

struct Digit {
    i128 nb, lo, hi;
};

i128 floor_div(i128 a, i128 b) {  // b > 0
    i128 q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}
i128 ceil_div(i128 a, i128 b) { return -floor_div(-a, b); }

// Is `target` = Σ_{e >= k} t_e·nb_e with t_e in [lo_e, hi_e]? inner_lo/hi[k] = reach of dims >= k.
bool representable(i128 target, const Digit *dg, const i128 *inner_lo, const i128 *inner_hi, int k,
                   int n, int *budget) {
    if (k == n) return target == 0;
    if (--*budget < 0) return true;  // conservative
    const Digit &d = dg[k];
    i128 tmin = std::max(d.lo, ceil_div(target - inner_hi[k + 1], d.nb));
    i128 tmax = std::min(d.hi, floor_div(target - inner_lo[k + 1], d.nb));
    for (i128 t = tmin; t <= tmax; ++t)
        if (representable(target - t * d.nb, dg, inner_lo, inner_hi, k + 1, n, budget)) return true;
    return false;
}

// representable() over digits sorted largest stride first (n <= 8).
bool solvable(i128 target, Digit *dg, int n, int *budget) {
    for (int i = 1; i < n; ++i)  // insertion sort, largest stride first
        for (int j = i; j > 0 && dg[j - 1].nb < dg[j].nb; --j) std::swap(dg[j - 1], dg[j]);
    i128 inner_lo[9], inner_hi[9];
    inner_lo[n] = inner_hi[n] = 0;
    for (int k = n - 1; k >= 0; --k) {
        inner_lo[k] = inner_lo[k + 1] + dg[k].lo * dg[k].nb;
        inner_hi[k] = inner_hi[k + 1] + dg[k].hi * dg[k].nb;
    }
    return representable(target, dg, inner_lo, inner_hi, 0, n, budget);
}

// Byte span [begin, end) of a non-empty view with non-negative strides.
void byte_span(const View &v, i128 *begin, i128 *end) {
    const fattn_tensor &t = *v.t;
    i128 last = 0;
    for (int d = 0; d <= v.inner; ++d) last += i128(t.ne[d] - 1) * t.nb[d];
    *begin = i128(reinterpret_cast<uintptr_t>(t.data));
    *end = *begin + (last + 1) * i128(fattn_dtype_size(t.dtype));
}

// Does a view (non-negative strides, no stride 0 on a dim of size > 1) address one element from
// two different index tuples? Fast path: sorted by stride, every stride exceeds the span of the
// dims inside it (nested, like any contiguous or sliced layout) — no. Otherwise an exact search
// for a non-zero digit vector t with Σ t_d·nb_d = 0, |t_d| < ne_d; by symmetry the first
// non-zero digit (largest stride first) is taken positive. On "yes", *dim is the first dim whose
// stride does not clear the dims inside it, *span that span in elements (for the message).
bool self_overlaps(const View &v, int *dim, int64_t *span) {
    const fattn_tensor &t = *v.t;
    struct Dm {
        int64_t nb, ne;
        int d;
    } ds[4];
    int n = 0;
    for (int d = 0; d <= v.inner; ++d)
        if (t.ne[d] > 1) ds[n++] = Dm{t.nb[d], t.ne[d], d};
    // Ascending stride; on equal strides the inner dim first, so the outer one gets named.
    auto before = [](const Dm &a, const Dm &b) { return a.nb != b.nb ? a.nb < b.nb : a.d > b.d; };
    for (int i = 1; i < n; ++i)  // insertion sort: n <= 4
        for (int j = i; j > 0 && before(ds[j], ds[j - 1]); --j) std::swap(ds[j - 1], ds[j]);
    i128 ext = 0;
    int bad = -1;
    for (int i = 0; i < n; ++i) {
        if (bad < 0 && i128(ds[i].nb) <= ext) {
            bad = i;
            *dim = ds[i].d;
            *span = int64_t(std::min<i128>(ext + 1, kMaxBytes));
        }
        ext += i128(ds[i].ne - 1) * ds[i].nb;
    }
    if (bad < 0) return false;
    int budget = 1 << 14;
    for (int k = n - 1; k >= 0; --k) {  // ds[k] is the largest-stride non-zero digit
        Digit dg[4];
        int m = 0;
        dg[m++] = Digit{i128(ds[k].nb), 1, i128(ds[k].ne - 1)};
        for (int i = 0; i < k; ++i) dg[m++] = Digit{i128(ds[i].nb), -i128(ds[i].ne - 1), i128(ds[i].ne - 1)};
        if (solvable(0, dg, m, &budget)) return true;
    }
    return false;
}

}  // namespace

int64_t numel(const fattn_tensor &t) {
    i128 n = elems128(t);
    return n > kMaxBytes ? INT64_MAX : int64_t(n);
}

bool valid_dtype(const fattn_dtype &t) {
    int64_t v = raw_enum(t);
    return v == FATTN_F32 || v == FATTN_F16 || v == FATTN_BF16;
}

bool views_overlap(const View &a, const View &b) {
    const fattn_tensor &ta = *a.t, &tb = *b.t;
    if (elems128(ta) == 0 || elems128(tb) == 0) return false;
    i128 a0, a1, b0, b1;
    byte_span(a, &a0, &a1);
    byte_span(b, &b0, &b1);
    if (a1 <= b0 || b1 <= a0) return false;  // disjoint extents
    i128 es = i128(fattn_dtype_size(ta.dtype));
    if (es != i128(fattn_dtype_size(tb.dtype))) return true;
    // Effective per-dim strides: a dim of size 1 takes the other view's stride (its own is never
    // used); a dim beyond a view's innermost dim has size 1.
    Digit dg[8];
    int n = 0;
    for (int d = 0; d < 4; ++d) {
        int64_t nea = d <= a.inner ? ta.ne[d] : 1, neb = d <= b.inner ? tb.ne[d] : 1;
        if (nea == 1 && neb == 1) continue;
        int64_t sa = ta.nb[d], sb = tb.nb[d];
        if (nea > 1 && neb > 1 && sa != sb) {  // different layouts: one digit per view
            if (sa != 0) dg[n++] = Digit{i128(sa), 0, i128(nea - 1)};
            if (sb != 0) dg[n++] = Digit{i128(sb), -i128(neb - 1), 0};
            continue;
        }
        int64_t s = nea == 1 ? sb : sa;
        if (s == 0) continue;  // broadcast dim of an input: irrelevant
        dg[n++] = Digit{i128(s), -i128(neb - 1), i128(nea - 1)};
    }
    i128 delta = b0 - a0;  // bytes
    int budget = 1 << 14;
    i128 lo = floor_div(delta, es), hi = ceil_div(delta, es);  // equal when δ is a multiple of es
    for (i128 m = lo; m <= hi; ++m) {
        Digit work[8];
        std::copy(dg, dg + n, work);
        if (solvable(m, work, n, &budget)) return true;
    }
    return false;
}

bool view_touches(const View &v, const void *p, size_t bytes) {
    if (!v.t || !v.t->data || elems128(*v.t) == 0 || !p || bytes == 0) return false;
    i128 v0, v1;
    byte_span(v, &v0, &v1);
    const i128 b0 = i128(reinterpret_cast<uintptr_t>(p)), b1 = b0 + i128(bytes);
    return b0 < v1 && v0 < b1;
}

fattn_status check_dtype_valid(const View &v, string *why) {
    if (valid_dtype(v.t->dtype)) return FATTN_OK;
    return fail(why, FATTN_ERR_BAD_VALUE,
                string(v.name) + ": dtype " + S(raw_enum(v.t->dtype)) + " is not a fattn_dtype");
}

fattn_status check_dtype_is(const View &v, fattn_dtype want, const char *src, string *why) {
    if (v.t->dtype == want) return FATTN_OK;
    const string head = string(v.name) + ": dtype is " + fattn_dtype_name(v.t->dtype);
    return fail(why, FATTN_ERR_DTYPE_MISMATCH,
                src ? head + " but " + src + " is " + fattn_dtype_name(want)
                    : head + ", must be " + fattn_dtype_name(want));
}

fattn_status check_shape(const View &v, const Want (&want)[4], string *why) {
    const char *const *names = v.inner == 2 ? kLseDimNames : kDimNames;
    for (int d = 0; d < 4; ++d) {
        const int64_t got = v.t->ne[d];
        const string head = string(v.name) + ": ne[" + S(d) + "] (" + names[d] + ") is " + S(got);
        if (got < 0) return fail(why, FATTN_ERR_SHAPE_MISMATCH, head + ", must not be negative");
        if (!want[d].src || got == want[d].val) continue;
        if (!*want[d].src)  // a fixed size, not another tensor's
            return fail(why, FATTN_ERR_SHAPE_MISMATCH, head + ", must be " + S(want[d].val));
        return fail(why, FATTN_ERR_SHAPE_MISMATCH,
                    head + " but " + want[d].src + " has " + S(want[d].val));
    }
    return FATTN_OK;
}

fattn_status check_strides(const View &v, string *why) {
    const fattn_tensor &t = *v.t;
    const string name = v.name;
    const int inner = v.inner;
    for (int d = 0; d <= inner; ++d)
        if (t.nb[d] < 0)
            return fail(why, FATTN_ERR_BAD_STRIDE,
                        name + ": nb[" + S(d) + "] is " + S(t.nb[d]) + ", strides must not be negative");
    // A size-1 innermost dim has no stride that matters (beta [B, T, H, 1]).
    if (t.nb[inner] != 1 && t.ne[inner] > 1)
        return fail(why, FATTN_ERR_BAD_STRIDE,
                    name + ": nb[" + S(inner) + "] (innermost stride) is " + S(t.nb[inner]) +
                        ", must be 1");
    const i128 n = elems128(t);
    if (v.sized && n * i128(fattn_dtype_size(t.dtype)) > kMaxBytes)
        return fail(why, FATTN_ERR_BAD_VALUE,
                    name + ": " + dims_str({t.ne[0], t.ne[1], t.ne[2], t.ne[3]}) + " " +
                        fattn_dtype_name(t.dtype) +
                        " elements are more than 2^63 bytes (a size product overflows)");
    if (n == 0) return FATTN_OK;  // an empty view addresses nothing, whatever its strides
    // The view's byte span must be addressable with 64-bit offsets.
    i128 last = 0;
    for (int d = 0; d <= inner; ++d) last += i128(t.ne[d] - 1) * t.nb[d];
    if ((last + 1) * i128(fattn_dtype_size(t.dtype)) > kMaxBytes)
        return fail(why, FATTN_ERR_BAD_STRIDE, name + ": the view spans more than 2^63 bytes");
    if (!v.output) return FATTN_OK;  // inputs may alias themselves (stride 0 broadcasts)
    for (int d = 0; d < inner; ++d)
        if (t.nb[d] == 0 && t.ne[d] > 1)
            return fail(why, FATTN_ERR_BAD_STRIDE,
                        name + ": nb[" + S(d) + "] is 0 on a dim of size " + S(t.ne[d]) +
                            ": an output element would be written twice");
    int dim = 0;
    int64_t span = 0;
    if (self_overlaps(v, &dim, &span))
        return fail(why, FATTN_ERR_BAD_STRIDE,
                    name + ": the view overlaps itself (nb[" + S(dim) + "] = " + S(t.nb[dim]) +
                        " but the dims inside it span " + S(span) +
                        " elements): an output element would be written twice");
    return FATTN_OK;
}

fattn_status check_data(const View &v, string *why) {
    const fattn_tensor &t = *v.t;
    const int64_t n = numel(t);
    if (n == 0) return FATTN_OK;
    if (!t.data)
        return fail(why, FATTN_ERR_NULL_POINTER,
                    string(v.name) + ": data is NULL in a tensor of " + S(n) + " elements");
    const size_t es = fattn_dtype_size(t.dtype);
    const uintptr_t a = reinterpret_cast<uintptr_t>(t.data);
    if (a % es != 0)
        return fail(why, FATTN_ERR_BAD_VALUE,
                    string(v.name) + ": data pointer is not aligned to its " + S(int64_t(es)) +
                        "-byte " + fattn_dtype_name(t.dtype) + " elements (address % " +
                        S(int64_t(es)) + " = " + S(int64_t(a % es)) + ")");
    return FATTN_OK;
}

fattn_status check_implied_size(const char *what, std::initializer_list<int64_t> ne,
                                size_t elem_size, string *why) {
    for (int64_t x : ne)
        if (x <= 0) return FATTN_OK;  // empty: any other dim is fine (dims were checked >= 0)
    i128 n = i128(elem_size);
    for (int64_t x : ne) {
        n *= i128(x);
        if (n > kMaxBytes)
            return fail(why, FATTN_ERR_BAD_VALUE,
                        string(what) + " " + dims_str(ne) + " of " + S(int64_t(elem_size)) +
                            "-byte elements would be more than 2^63 bytes (a size product overflows)");
    }
    return FATTN_OK;
}

fattn_status check_overlaps(const View *views, int n, string *why) {
    for (int i = 0; i < n; ++i) {
        if (!views[i].output || !views[i].t || !views[i].t->data) continue;
        for (int j = 0; j < n; ++j) {
            if (j == i || (views[j].output && j < i)) continue;  // each output pair once
            if (!views[j].t || !views[j].t->data) continue;
            if (views_overlap(views[i], views[j]))
                return fail(why, FATTN_ERR_OVERLAP,
                            string(views[i].name) + ": overlaps " +
                                (views[j].output ? "output " : "input ") + views[j].name);
        }
    }
    return FATTN_OK;
}

fattn_status check_int32_array(const char *name, const int32_t *a, int64_t n, const View *views,
                               int nviews, string *why) {
    if (n <= 0) return FATTN_OK;
    if (n > INT64_MAX / 4)
        return fail(why, FATTN_ERR_BAD_SEQLENS,
                    string(name) + ": " + S(n) + " int32 entries are more than 2^63 bytes");
    if (reinterpret_cast<uintptr_t>(a) % 4 != 0)
        return fail(why, FATTN_ERR_BAD_VALUE, string(name) + ": pointer is not 4-byte aligned (int32)");
    // The array as a one-dim view of 4-byte elements, for the shared overlap test.
    const fattn_tensor t = fattn_tensor_4d(const_cast<int32_t *>(a), FATTN_F32, 1, 1, 1, n, 0, 0, 0, 1);
    const View av{name, &t, false, 3};
    for (int i = 0; i < nviews; ++i) {
        const View &o = views[i];
        if (!o.output || !o.t || !o.t->data) continue;
        if (views_overlap(av, o))
            return fail(why, FATTN_ERR_OVERLAP, string(name) + ": overlaps output " + o.name);
    }
    return FATTN_OK;
}

fattn_status check_cu_seqlens(const char *name, const int32_t *cu, int64_t num_seqs,
                              int64_t total, const char *tensor, int64_t *max_len, string *why) {
    if (cu[0] != 0)
        return fail(why, FATTN_ERR_BAD_SEQLENS, string(name) + "[0] is " + S(cu[0]) + ", must be 0");
    int64_t mx = 0;
    for (int64_t i = 0; i < num_seqs; ++i) {
        if (cu[i + 1] < cu[i])
            return fail(why, FATTN_ERR_BAD_SEQLENS,
                        string(name) + "[" + S(i + 1) + "] is " + S(cu[i + 1]) + " < " + name + "[" +
                            S(i) + "] = " + S(cu[i]) + ", must be non-decreasing");
        mx = std::max<int64_t>(mx, int64_t(cu[i + 1]) - cu[i]);
    }
    if (cu[num_seqs] != total)
        return fail(why, FATTN_ERR_BAD_SEQLENS,
                    string(name) + "[" + S(num_seqs) + "] (last) is " + S(cu[num_seqs]) + " but " +
                        tensor + " has ne[1] = " + S(total) + " tokens");
    *max_len = mx;
    return FATTN_OK;
}

}  // namespace fattn::vc
