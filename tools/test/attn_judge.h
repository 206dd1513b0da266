// attn_judge.h — the softmax-attention family's pieces, shared by its files:
//   attn_run.cpp       running a case through the C API (run_lib) and the family loop
//   attn_judge.cpp     memory checks on what came back, the dense judge against the oracle
//   attn_sampled.cpp   the sampled judge of the --large cases
//   attn_selftest.cpp  grad mode (oracle vs finite differences) and selftest (injected faults)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "test/attn_setup.h"

namespace fattn_test {

std::string fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));

// Tolerance on rms(out - ref) / rms(ref) by resolved precision and storage dtype; lse's own.
double tolerance(fattn_prec resolved, fattn_dtype dt);
double lse_tolerance(fattn_prec resolved);

struct RunTimes {
    double fwd_ms = 0, bwd_ms = 0;
};

// One fwd + bwd through the C API; outputs downloaded into in.buf[..].host. Returns false with
// *msg when the library refused or a memory check failed; *unsupported is set when
// fattn_attn_supports said no (msg = reason).
bool run_lib(fattn_ctx_t *ctx, BackendKind bk, Inst &in, fattn_algo algo, fattn_prec prec, bool *unsupported,
             fattn_prec *resolved, std::string *msg, RunTimes *times = nullptr, bool query_only = false);

// After a call wrote into b (downloaded with its guard): every covered cell must be written
// (no NaN), every other cell up to the end of the guard must still hold the poison byte. One
// pass over the buffer on every core; also counts covered ±inf cells into b.n_inf.
void check_written(Buf &b, std::vector<std::string> *errs);

// Every output against the dense oracle (small and medium cases).
bool judge(const Inst &in, const fattn::ref::Outputs &r, double tol, double lse_tol, std::string *msg);
// Shared by judge and judge_sampled: "o e lse e dq e dk e dv e " into *line and one error per
// output above its bar (tol; lse: min(tol, lse_tol)); then the verdict message (first 6 errors | line).
void score_outputs(const double (&e)[5], double tol, double lse_tol, std::string *line, std::vector<std::string> *errs);
bool verdict(const std::vector<std::string> &errs, const std::string &line, std::string *msg);

// What the sampled judge looks at. Besides `rows` and `keys` random picks, it always takes the
// first and last rows and keys of the first and last sequences, and the rows (keys) on either
// side of each element offset in `offsets` in o, lse and dq (dk, dv): a 32-bit offset
// somewhere shows there.
struct SampleOpts {
    std::vector<int64_t> offsets = {int64_t(1) << 31, int64_t(1) << 32};
    int rows = 48;
    int keys = 16;
};

// Large cases: sampled rows of o, lse, dq and sampled keys of dk, dv against the oracle's sampled
// layer on the part of the sequence they need; masked rows / unseen keys checked directly;
// ±inf anywhere in o, dq, dk, dv (counted by check_written) fails.
bool judge_sampled(const Inst &in, double tol, double lse_tol, std::string *msg, const SampleOpts &so = SampleOpts());

// grad mode: the oracle's backward vs central differences of its forward.
bool grad_case(const Inst &in, std::string *msg);

// selftest: the checks must be able to fail.
void selftest_case(fattn_ctx_t *ctx, BackendKind bk, const AttnCase &c, Summary &s);

}  // namespace fattn_test
