// path_layout.cpp — sequence/segment/history bases and the workspace layout of PaTH calls.
// One function per question so the API (workspace_size, memory model) and the kernels can never
// disagree about a size: both call these.
#include "core/path_params.h"

#include <algorithm>

namespace fattn {

PathLayout path_layout(const PathFwdParams &p) {
    PathLayout lay;
    lay.rows = p.B * p.T;
    lay.seg_base.assign(size_t(p.num_seqs) + 1, 0);
    lay.hist_base.assign(size_t(p.num_seqs) + 1, 0);
    for (int64_t s = 0; s < p.num_seqs; ++s) {
        PathSeq sq = path_seq(p, s);
        int64_t n = path_num_segments(sq.len);
        lay.max_segments = std::max(lay.max_segments, n);
        lay.max_len = std::max(lay.max_len, sq.len);
        lay.total_chunks += path_num_chunks(sq.len);
        lay.seg_base[size_t(s) + 1] = lay.seg_base[size_t(s)] + n;
        lay.hist_base[size_t(s) + 1] = lay.hist_base[size_t(s)] + path_packed_cells(sq.len);
    }
    lay.hist_cells = p.history == FATTN_PATH_HISTORY_RECTANGULAR
                         ? lay.rows * lay.max_segments
                         : lay.hist_base[size_t(p.num_seqs)];
    return lay;
}

namespace {
size_t take(size_t *cursor, uint64_t bytes) {
    size_t at = *cursor;
    *cursor += size_t((bytes + 63) / 64 * 64);
    return at;
}
}  // namespace

PathWorkspace path_workspace(const PathFwdParams &p, const PathLayout &lay, fattn_dir dir) {
    PathWorkspace ws;
    size_t c = 0;
    const uint64_t f = sizeof(float);
    const uint64_t rk = uint64_t(lay.rows) * uint64_t(p.h) * uint64_t(p.dk) * f;  // [rows, H, K]
    const uint64_t rq = uint64_t(lay.rows) * uint64_t(p.hq) * f;                  // [rows, Hq]
    if (dir == FATTN_DIR_BWD) {
        ws.history_bytes = size_t(uint64_t(lay.hist_cells) * uint64_t(p.hq) * uint64_t(p.dk) *
                                  fattn_dtype_size(p.dtype));
        ws.history = take(&c, ws.history_bytes);
    }
    ws.u = take(&c, rk);
    ws.kt = take(&c, rk);
    ws.gsum = take(&c, rq);
    if (dir == FATTN_DIR_BWD) {
        const uint64_t kk = uint64_t(lay.seg_base.back()) * uint64_t(p.h) * uint64_t(p.dk) *
                            uint64_t(p.dk) * f;  // [segments, H, K, K]
        ws.kh = take(&c, rk);
        ws.dkh = take(&c, rk);
        ws.dkt = take(&c, rk);
        ws.du = take(&c, rk);
        ws.dwacc = take(&c, rk);
        ws.dkacc = take(&c, rk);
        ws.dvacc = take(&c, uint64_t(lay.rows) * uint64_t(p.h) * uint64_t(p.dv) * f);
        ws.dbacc = take(&c, uint64_t(lay.rows) * uint64_t(p.h) * f);
        ws.dgs = take(&c, rq);
        ws.delta = take(&c, rq);
        ws.e = take(&c, kk);
        ws.de = take(&c, kk);
    }
    ws.slot_bytes = path_slot_bytes(p, lay, dir);  // a multiple of 64
    // parallel_for runs min(nthreads, items) threads; no phase has more items than
    // max(chunks, sequences) x Hq, so no more slots can ever be busy at once.
    const int64_t most_items = std::max<int64_t>(1, std::max(lay.total_chunks, p.num_seqs) * p.hq);
    ws.nslots = int(std::min<int64_t>(std::max(p.nthreads, 1), most_items));
    ws.slots = take(&c, uint64_t(ws.slot_bytes) * uint64_t(ws.nslots));
    ws.total = c + kPathWsAlign;  // slack: path_ws_base() may advance the caller's pointer by < 64
    return ws;
}

}  // namespace fattn
