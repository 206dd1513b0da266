// path_layout.cpp — sequence/segment/history bases and the workspace layout of PaTH calls.
// One function per question so the API (workspace_size, memory model) and the kernels can never
// disagree about a size: both call these.
#include "core/path_params.h"

#include <algorithm>

#include "core/size_math.h"

namespace fattn {

namespace {

using i128 = __int128;

int64_t sat64(i128 x) { return x > i128(INT64_MAX) ? INT64_MAX : int64_t(x); }

// path_packed_cells in 128 bits: (n - 1)·L overflows int64 for a size query's huge T.
i128 packed_cells128(int64_t len) {
    const i128 n = path_num_segments(len);
    return (n - 1) * len - i128(kPathSegment) * n * (n - 1) / 2;
}

}  // namespace

PathLayout path_layout(const PathFwdParams &p, bool bases) {
    PathLayout lay;
    lay.rows = p.B * p.T;  // validated: every [B, T, ...] tensor fits in 2^63 bytes
    if (!bases && !p.cu_seqlens) {
        // Dense, sizes only: every sequence has length T, so the totals are closed-form and a
        // size query never allocates O(B) host memory (B = 2^40 once asked for 8 TiB of bases).
        const int64_t n = path_num_segments(p.T);
        lay.max_segments = n;
        lay.max_len = p.T;
        lay.total_chunks = sat64(i128(p.B) * path_num_chunks(p.T));
        lay.segments = sat64(i128(p.B) * n);
        lay.hist_cells = p.history == FATTN_PATH_HISTORY_RECTANGULAR ? sat64(i128(lay.rows) * n)
                                                                    : sat64(i128(p.B) * packed_cells128(p.T));
        return lay;
    }
    lay.seg_base.assign(size_t(p.num_seqs) + 1, 0);
    lay.hist_base.assign(size_t(p.num_seqs) + 1, 0);
    for (int64_t s = 0; s < p.num_seqs; ++s) {
        PathSeq sq = path_seq(p, s);
        int64_t n = path_num_segments(sq.len);
        lay.max_segments = std::max(lay.max_segments, n);
        lay.max_len = std::max(lay.max_len, sq.len);
        lay.total_chunks += path_num_chunks(sq.len);
        lay.seg_base[size_t(s) + 1] = lay.seg_base[size_t(s)] + n;
        lay.hist_base[size_t(s) + 1] = sat64(i128(lay.hist_base[size_t(s)]) + packed_cells128(sq.len));
    }
    lay.segments = lay.seg_base[size_t(p.num_seqs)];
    lay.hist_cells = p.history == FATTN_PATH_HISTORY_RECTANGULAR
                         ? sat64(i128(lay.rows) * lay.max_segments)
                         : lay.hist_base[size_t(p.num_seqs)];
    return lay;
}

namespace {
// Saturating (size_math.h): a size that does not fit reads SIZE_MAX, never a small wrapped value.
size_t take(size_t *cursor, size_t bytes) {
    size_t at = *cursor;
    *cursor = sat_add(*cursor, sat_round(bytes, 64));
    return at;
}
}  // namespace

PathWorkspace path_workspace(const PathFwdParams &p, const PathLayout &lay, fattn_dir dir) {
    PathWorkspace ws;
    size_t c = 0;
    const size_t f = sizeof(float);
    const size_t rk = sat_prod({lay.rows, p.h, p.dk, int64_t(f)});  // [rows, H, K]
    const size_t rq = sat_prod({lay.rows, p.hq, int64_t(f)});       // [rows, Hq]
    if (dir == FATTN_DIR_BWD) {
        ws.history_bytes = sat_prod({lay.hist_cells, p.hq, p.dk, int64_t(fattn_dtype_size(p.dtype))});
        ws.history = take(&c, ws.history_bytes);
    }
    ws.u = take(&c, rk);
    ws.kt = take(&c, rk);
    ws.gsum = take(&c, rq);
    if (dir == FATTN_DIR_BWD) {
        const size_t kk = sat_prod({lay.segments, p.h, p.dk, p.dk, int64_t(f)});  // [segments, H, K, K]
        ws.kh = take(&c, rk);
        ws.dkh = take(&c, rk);
        ws.dkt = take(&c, rk);
        ws.du = take(&c, rk);
        ws.dwacc = take(&c, rk);
        ws.dkacc = take(&c, rk);
        ws.dvacc = take(&c, sat_prod({lay.rows, p.h, p.dv, int64_t(f)}));
        ws.dbacc = take(&c, sat_prod({lay.rows, p.h, int64_t(f)}));
        ws.dgs = take(&c, rq);
        ws.delta = take(&c, rq);
        ws.e = take(&c, kk);
        ws.de = take(&c, kk);
    }
    ws.slot_bytes = path_slot_bytes(p, lay, dir);  // a multiple of 64
    // parallel_for runs min(nthreads, items) threads; no phase has more items than
    // max(chunks, sequences) x Hq, so no more slots can ever be busy at once.
    const int64_t most_items =
        std::max<int64_t>(1, sat64(i128(std::max(lay.total_chunks, p.num_seqs)) * p.hq));
    ws.nslots = int(std::min<int64_t>(std::max(p.nthreads, 1), most_items));
    ws.slots = take(&c, sat_mul(ws.slot_bytes, size_t(ws.nslots)));
    ws.total = sat_add(c, kPathWsAlign);  // slack: path_ws_base() may advance the caller's pointer by < 64
    return ws;
}

}  // namespace fattn
