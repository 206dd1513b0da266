// view_check.h — the view rules both families' support surfaces share (softmax attention in
// attn_validate.cpp, PaTH in path_api.cpp), so a rule and its message are written once and the
// two families cannot disagree on what a legal view is:
//   dtype is a fattn_dtype (BAD_VALUE) / the dtype it must be (DTYPE_MISMATCH);
//   dims non-negative and equal to what the other views imply (SHAPE_MISMATCH);
//   strides non-negative, innermost 1; an output never writes one element twice: no stride 0
//   on a dim of size > 1 and no self-overlap (BAD_STRIDE); the view and every tensor the call
//   implies fit in 2^63 bytes (BAD_VALUE); data non-NULL (NULL_POINTER) and aligned to its
//   element size (BAD_VALUE); outputs share no byte with each other, with inputs, or with the
//   cu_seqlens arrays (OVERLAP); cu_seqlens contents (BAD_SEQLENS).
// Each check returns FATTN_OK or the status of the rule broken, with the message in *why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "fattn/fattn.h"

namespace fattn::vc {

// One named view of a call and its role.
struct View {
    const char *name;
    const fattn_tensor *t;
    bool output;    // written by this call
    int inner = 3;  // the innermost (stride-1) dim: 3, or 2 for lse views ([B, H, S, 1])
    // Its logical size (all dims) must fit in 2^63 bytes: true for every view whose shape an
    // output shares (q's is dq's); false for a bias, whose broadcast [Sq, Skv] never materializes
    // (only its byte span must fit).
    bool sized = true;
};

// Dim names for messages: [B, S, H, D] tensors and [B, H, S, 1] lse views.
extern const char *const kDimNames[4];
extern const char *const kLseDimNames[4];

// Expected size of one dim. src == nullptr: any size; src == "": the fixed size val;
// otherwise the name of the view it must agree with ("k: ne[3] (head dim) is 80 but q has 64").
struct Want {
    int64_t val;
    const char *src;
};

// fattn_dtype value range (read raw: a C caller may store any int in the field).
bool valid_dtype(const fattn_dtype &t);
fattn_status check_dtype_valid(const View &v, std::string *why);
// v's dtype must be `want`; src names where the rule comes from ("q"), nullptr: a fixed dtype.
fattn_status check_dtype_is(const View &v, fattn_dtype want, const char *src, std::string *why);

fattn_status check_shape(const View &v, const Want (&want)[4], std::string *why);

// Strides, self-overlap of outputs and sizes; needs check_shape first (dims >= 0).
fattn_status check_strides(const View &v, std::string *why);

// NULL data in a non-empty view, and data not aligned to the element size.
fattn_status check_data(const View &v, std::string *why);

// A tensor the call implies but the caller may not have passed (o of a size query): its
// elements of elem_size bytes must fit in 2^63 bytes. `what` names it with its dims.
fattn_status check_implied_size(const char *what, std::initializer_list<int64_t> ne,
                                size_t elem_size, std::string *why);

// Every output against every other output and every input: OVERLAP naming both.
fattn_status check_overlaps(const View *views, int n, std::string *why);

// A raw int32 array of n entries the call reads (cu_seqlens): 4-byte aligned, and no output of
// the call may share a byte with it (the kernels read it while they write the outputs).
fattn_status check_int32_array(const char *name, const int32_t *a, int64_t n, const View *views,
                               int nviews, std::string *why);

// One cu_seqlens array in host memory: [0] = 0, non-decreasing, last = total (the tokens of
// `tensor`); *max_len gets the longest sequence.
fattn_status check_cu_seqlens(const char *name, const int32_t *cu, int64_t num_seqs,
                              int64_t total, const char *tensor, int64_t *max_len,
                              std::string *why);

// True when two non-empty views (non-negative strides; a dim of size 1 is ignored) share any
// byte. Exact for equal element sizes (disjoint interleaved views of one fused buffer are "no"),
// conservative otherwise.
bool views_overlap(const View &a, const View &b);

// True when the view's byte extent (first to last addressable byte) intersects the raw buffer
// [p, p + bytes): the conservative test for dense buffers (a workspace, EXACT's saved buffer).
bool view_touches(const View &v, const void *p, size_t bytes);

// Elements of a view (product of its dims), saturated at INT64_MAX: never wraps to 0.
int64_t numel(const fattn_tensor &t);

// The stride kernels step dim d by: 0 where the dim has extent 1. Such a dim is never stepped, so
// its stride may be any value (PyTorch gives size-1 dims arbitrary strides); normalizing it keeps
// every offset product a kernel forms (row * stride, a prefetch's stride in bytes) in range.
inline int64_t step(const fattn_tensor &t, int d) { return t.ne[d] == 1 ? 0 : t.nb[d]; }

}  // namespace fattn::vc
