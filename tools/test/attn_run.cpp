// attn_run.cpp — running softmax-attention cases through the public C API (run_lib) and the
// family's loop over its table.
//
// test:        fwd + bwd on the backend vs the float64 oracle, per output
//              rms(out - ref) / rms(ref) over rows that see at least one key, with a tolerance
//              by resolved precision and dtype; fully-masked rows checked directly (o = 0,
//              lse = -inf, dq = 0), key columns nobody sees checked directly (dk = dv = 0);
//              reference gradients must be non-zero; NaN poison + guard regions + unchanged
//              inputs checked after every call (attn_judge.cpp). Large cases: the same on
//              sampled rows and keys, NaN/inf/poison/guards on every element (attn_sampled.cpp).
// grad:        the oracle's backward vs central differences of its forward (double core).
// determinism: fwd + bwd twice, bitwise equal; on the CPU also nthreads 1 vs 2 vs 3.
// Cases marked want_dbias also ask the backward for dbias, judged and compared like the other
// outputs; where the backend answers FATTN_ERR_UNSUPPORTED for it they are skipped (reason shown).
// support:     fattn_attn_supports per case.
// perf:        median time of fwd and of bwd per case.
// selftest:    injected faults must be caught (attn_selftest.cpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <cstdlib>

#include "test/attn_judge.h"

namespace fattn_test {

namespace {

fattn_tensor tensor_of(Inst &in, const View &v) {
    Buf &b = in.buf[v.buf];
    char *base = static_cast<char *>(b.dev.ptr()) + size_t(v.off) * b.esz();
    return fattn_tensor_4d(base, b.dt, v.ne[0], v.ne[1], v.ne[2], v.ne[3], v.nb[0], v.nb[1], v.nb[2], v.nb[3]);
}

bool guard_intact(const DevBuf &d, size_t used) {
    std::vector<unsigned char> g(kGuardBytes);
    if (!d.download(g.data(), kGuardBytes, used)) return false;
    return std::all_of(g.begin(), g.end(), [](unsigned char x) { return x == kPoisonByte; });
}

}  // namespace

bool run_lib(fattn_ctx_t *ctx, BackendKind bk, Inst &in, fattn_algo algo, fattn_prec prec, bool *unsupported,
             fattn_prec *resolved, std::string *msg, RunTimes *times, bool query_only) {
    *unsupported = false;
    std::vector<std::string> errs;
    // Device buffers: inputs uploaded (their host copy holds poison wherever no view lives),
    // everything else and every guard poisoned.
    for (auto &b : in.buf) {
        if (b.elems == 0) continue;
        if (!b.dev.alloc(bk, b.bytes() + kGuardBytes)) return *msg = fmt("%s: device alloc failed", b.name), false;
        if (b.output ? !b.dev.poison() : !b.dev.upload(b.host.data(), b.bytes()) || !b.dev.poison(b.bytes()))
            return *msg = fmt("%s: upload failed", b.name), false;
    }
    DevBuf cuq, cukv;
    fattn_attn_params p = fattn_attn_params_default();
    const AttnCase &c = *in.c;
    p.scale = c.scale, p.causal = c.causal, p.prec = prec, p.algo = algo;
    p.window_left = c.win_left, p.window_right = c.win_right, p.window_align = c.win_align;
    if (in.has_bias()) p.bias = tensor_of(in, in.bias);
    if (c.is_varlen()) {
        size_t nb = in.cu_q.size() * sizeof(int32_t);
        if (!cuq.alloc(bk, nb) || !cukv.alloc(bk, nb) || !cuq.upload(in.cu_q.data(), nb) || !cukv.upload(in.cu_kv.data(), nb))
            return *msg = "cu_seqlens upload failed", false;
        p.cu_seqlens_q = static_cast<const int32_t *>(cuq.ptr());
        p.cu_seqlens_kv = static_cast<const int32_t *>(cukv.ptr());
        p.num_seqs = in.nseq;
        p.max_seqlen_q = in.max_q;
        p.max_seqlen_kv = in.max_kv;
    }
    fattn_tensor q = tensor_of(in, in.q), k = tensor_of(in, in.k), v = tensor_of(in, in.v);
    fattn_tensor o = tensor_of(in, in.o), lse = tensor_of(in, in.lse), dout = tensor_of(in, in.dout);
    fattn_tensor dq = tensor_of(in, in.dq), dk = tensor_of(in, in.dk), dv = tensor_of(in, in.dv);
    // A case that wants dbias asks for it everywhere (supports, sizes, backward): a backend
    // that cannot compute it refuses the case (reported as skipped), never runs it without.
    const fattn_tensor dbias = in.wants_dbias() ? tensor_of(in, in.dbias) : fattn_tensor_none();
    const uint32_t want = in.wants_dbias() ? FATTN_ATTN_WANT_DBIAS : 0u;
    char why[512] = {0};
    fattn_status st = fattn_attn_supports_ex(ctx, &p, &q, &k, &v, want, why, sizeof why);
    if (st != FATTN_OK) {
        *unsupported = true;
        *msg = fmt("%s: %s", fattn_status_string(st), why);
        return false;
    }
    *resolved = fattn_resolve_prec(ctx, &p, &q);
    if (query_only) return true;
    size_t ws_f = 0, ws_b = 0, saved_n = 0;
    if ((st = fattn_attn_workspace_size(ctx, &p, &q, &k, &v, FATTN_DIR_FWD, &ws_f)) != FATTN_OK ||
        (st = fattn_attn_workspace_size_ex(ctx, &p, &q, &k, &v, want, FATTN_DIR_BWD, &ws_b)) != FATTN_OK ||
        (st = fattn_attn_saved_size(ctx, &p, &q, &k, &v, &saved_n)) != FATTN_OK)
        return *msg = fmt("size query: %s: %s", fattn_status_string(st), fattn_ctx_last_error(ctx)), false;
    DevBuf wsf, wsb, saved;
    if (!wsf.alloc(bk, ws_f + kGuardBytes) || !wsb.alloc(bk, ws_b + kGuardBytes) || !saved.alloc(bk, saved_n + kGuardBytes) ||
        !wsf.poison() || !wsb.poison() || !saved.poison())
        return *msg = "workspace alloc failed", false;

    auto now = [] { return std::chrono::steady_clock::now(); };
    auto t0 = now();
    st = fattn_attn_fwd(ctx, &p, &q, &k, &v, &o, &lse, saved_n ? saved.ptr() : nullptr, ws_f ? wsf.ptr() : nullptr, ws_f);
    backend_sync(bk);
    auto t1 = now();
    if (st != FATTN_OK) return *msg = fmt("fwd: %s: %s", fattn_status_string(st), fattn_ctx_last_error(ctx)), false;
    for (int id : {BUF_O, BUF_LSE}) {
        Buf &b = in.buf[id];
        b.host.resize(b.bytes() + kGuardBytes);
        b.dev.download(b.host.data(), b.host.size());
        check_written(b, &errs);
    }
    if (!guard_intact(wsf, ws_f)) errs.push_back("fwd workspace: guard overwritten");
    if (!guard_intact(saved, saved_n)) errs.push_back("saved: guard overwritten");
    std::vector<unsigned char> saved_after_fwd(saved_n);
    saved.download(saved_after_fwd.data(), saved_n);

    auto t2 = now();
    st = fattn_attn_bwd_ex(ctx, &p, &q, &k, &v, &o, &lse, saved_n ? saved.ptr() : nullptr, &dout, &dq, &dk, &dv,
                           in.wants_dbias() ? &dbias : nullptr, ws_b ? wsb.ptr() : nullptr, ws_b);
    backend_sync(bk);
    auto t3 = now();
    if (st != FATTN_OK) return *msg = fmt("bwd: %s: %s", fattn_status_string(st), fattn_ctx_last_error(ctx)), false;
    for (int id : {BUF_DQ, BUF_DK, BUF_DV, BUF_DBIAS}) {
        Buf &b = in.buf[id];
        if (b.elems == 0) continue;
        b.host.resize(b.bytes() + kGuardBytes);
        b.dev.download(b.host.data(), b.host.size());
        check_written(b, &errs);
    }
    if (!guard_intact(wsb, ws_b)) errs.push_back("bwd workspace: guard overwritten");
    // Nothing the calls only read may change: inputs (and their guards), o and lse in the
    // backward (host o/lse still hold the download after the forward), saved.
    for (int id : {BUF_Q, BUF_K, BUF_V, BUF_DO, BUF_BIAS}) {
        Buf &b = in.buf[id];
        if (b.elems == 0) continue;
        if (!b.dev.equals(b.host.data(), b.bytes())) errs.push_back(fmt("input %s was modified", b.name));
        if (!guard_intact(b.dev, b.bytes())) errs.push_back(fmt("input %s: guard overwritten", b.name));
    }
    for (int id : {BUF_O, BUF_LSE}) {
        Buf &b = in.buf[id];
        if (!b.dev.equals(b.host.data(), b.host.size())) errs.push_back(fmt("bwd modified %s", b.name));
    }
    std::vector<unsigned char> saved_now(saved_n);
    saved.download(saved_now.data(), saved_n);
    if (saved_now != saved_after_fwd) errs.push_back("bwd modified the saved buffer");
    if (times) {
        times->fwd_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
        times->bwd_ms = std::chrono::duration<double, std::milli>(t3 - t2).count();
    }
    for (auto &b : in.buf) b.dev.release();
    if (!errs.empty()) {
        std::string m;
        for (auto &e : errs) m += (m.empty() ? "" : "; ") + e;
        *msg = m;
        return false;
    }
    return true;
}

// ---------------------------------------------------------------- the family

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::vector<fattn_algo> algos_of(const Options &o, const AttnCase &c) {
    std::vector<fattn_algo> a;
    if (o.algo_fused && c.algo != AlgoSel::EXACT) a.push_back(FATTN_ALGO_FUSED);
    if (o.algo_exact && c.algo != AlgoSel::FUSED) a.push_back(FATTN_ALGO_EXACT);
    return a;
}

// Ref cost of a case (multiply-adds of its materialized fwd), for choosing grad-mode cases.
double ref_cost(const Inst &in) {
    const AttnCase &c = *in.c;
    double s = 0;
    if (c.is_varlen())
        for (size_t i = 0; i < c.seqlens_q.size(); ++i) s += double(c.seqlens_q[i]) * c.seqlens_kv[i];
    else
        s = double(c.B) * c.Sq * c.Skv;
    return s * double(c.Hq) * double(c.D + c.Dv);
}

}  // namespace

int run_attn_family(const Options &o, Summary &s) {
    std::string why;
    std::unique_ptr<fattn_ctx_t, void (*)(fattn_ctx_t *)> ctx(nullptr, fattn_ctx_free);
    if (o.mode != Mode::GRAD) {
        ctx.reset(make_ctx(o.backend, o.threads, &why, o.family));
        if (!ctx) {
            // A missing backend is a failure, never a silent CPU run.
            record(s, Outcome::FAIL, "attn/context", "cannot create the requested backend: " + why);
            return 0;
        }
    }
    const bool cpu = o.backend == BackendKind::CPU;
    if (o.mode == Mode::SELFTEST) {
        for (const AttnCase &c : attn_cases())
            if ((c.name == "plain_s17" || c.name == "causal_br_sq97_skv40" || c.name == "bias_rowcol" ||
                 c.name == "fused_qkv" || c.name == "dbias_keypad_causal_br") && selected(o, c.name))
                selftest_case(ctx.get(), o.backend, c, s);
        return 0;
    }
    for (const AttnCase &c : attn_cases()) {
        if (!selected(o, c.name)) continue;
        if (o.quick && !c.quick) continue;
        if (c.extra && !o.extra && !explicitly_requested(o)) continue;
        if (c.large) {
            // Listed with --large (or a -p naming "large"); run on the CPU only when -p selects it.
            const bool named = explicitly_requested(o) && o.pattern.find("large") != std::string::npos;
            if (!o.large && !named) continue;
            if (o.mode == Mode::GRAD) continue;
            if (cpu && !explicitly_requested(o)) {
                record(s, Outcome::SKIP, c.name, "large case: CUDA-sized; name it with -p to run it on the CPU");
                continue;
            }
        }
        Inst in;
        const auto t_setup = std::chrono::steady_clock::now();
        setup_inst(c, &in);
        if (o.verbose)
            std::printf("        %s: setup %.2f s (%d host threads)\n", c.name.c_str(), seconds_since(t_setup), host_threads());
        if (getenv("SETUP_ONLY")) { std::printf("setup-only %.2f\n", seconds_since(t_setup)); fflush(stdout); continue; }
        if (o.verbose)
            std::printf("        %s: B %lld Sq %lld Skv %lld Hq %lld Hkv %lld D %lld Dv %lld %s, causal %d, window (%lld, %lld, %s), "
                        "bias kind %d (%s), layout %d%s\n",
                        c.name.c_str(), (long long)in.Bv, (long long)in.Sq, (long long)in.Skv, (long long)c.Hq, (long long)c.Hkv,
                        (long long)c.D, (long long)c.Dv, fattn_dtype_name(c.dtype), int(c.causal), (long long)c.win_left,
                        (long long)c.win_right, c.win_align == FATTN_ALIGN_BOTTOM_RIGHT ? "br" : "tl", int(c.bias),
                        fattn_dtype_name(c.bias_dtype), int(c.layout), c.is_varlen() ? fmt(", varlen %lld seqs", (long long)in.nseq).c_str() : "");
        const fattn_prec prec = o.prec != FATTN_PREC_AUTO ? o.prec : c.prec;
        if (o.mode == Mode::GRAD) {
            if (ref_cost(in) > 3e6) continue;  // finite differences only on the small cases
            std::string msg;
            bool ok = grad_case(in, &msg);
            record(s, ok ? Outcome::PASS : Outcome::FAIL, c.name, msg);
            continue;
        }
        fattn::ref::Outputs ref;
        bool have_ref = false;
        for (fattn_algo algo : algos_of(o, c)) {
            std::string name = c.name + (algo == FATTN_ALGO_FUSED ? "/fused" : "/exact");
            bool unsupported = false;
            fattn_prec resolved = FATTN_PREC_AUTO;
            std::string msg;
            if (o.mode == Mode::SUPPORT) {
                bool ok = run_lib(ctx.get(), o.backend, in, algo, prec, &unsupported, &resolved, &msg, nullptr, true);
                if (unsupported) record(s, Outcome::SKIP, name, msg);
                else record(s, ok ? Outcome::PASS : Outcome::FAIL, name,
                            ok ? fmt("supported, runs %s", fattn_prec_name(resolved)) : msg);
                continue;
            }
            if (o.mode == Mode::PERF) {
                std::vector<double> f, b;
                bool ok = true;
                for (int rep = 0; rep < 3 && ok; ++rep) {
                    RunTimes t;
                    ok = run_lib(ctx.get(), o.backend, in, algo, prec, &unsupported, &resolved, &msg, &t);
                    f.push_back(t.fwd_ms), b.push_back(t.bwd_ms);
                }
                if (unsupported) { record(s, Outcome::SKIP, name, msg); continue; }
                if (!ok) { record(s, Outcome::FAIL, name, msg); continue; }
                std::sort(f.begin(), f.end());
                std::sort(b.begin(), b.end());
                record(s, Outcome::PASS, name, fmt("fwd %.3f ms  fwd+bwd %.3f ms  (%s, median of 3)", f[1], f[1] + b[1], fattn_prec_name(resolved)));
                continue;
            }
            if (o.mode == Mode::DETERMINISM) {
                bool ok = run_lib(ctx.get(), o.backend, in, algo, prec, &unsupported, &resolved, &msg);
                if (unsupported) { record(s, Outcome::SKIP, name, msg); continue; }
                if (!ok) { record(s, Outcome::FAIL, name, msg); continue; }
                std::vector<HostBytes> first;
                const std::initializer_list<int> outs = {BUF_O, BUF_LSE, BUF_DQ, BUF_DK, BUF_DV, BUF_DBIAS};
                for (int id : outs) first.push_back(in.buf[id].host);
                std::vector<int> threads = {o.threads};
                if (cpu) threads = {1, 2, 3, o.threads};
                std::string detail = cpu ? fmt("threads %d vs", o.threads) : "run twice";
                bool same = true;
                for (int nt : threads) {
                    std::unique_ptr<fattn_ctx_t, void (*)(fattn_ctx_t *)> c2(make_ctx(o.backend, nt, &why, o.family), fattn_ctx_free);
                    if (!c2 || !run_lib(c2.get(), o.backend, in, algo, prec, &unsupported, &resolved, &msg)) {
                        ok = false;
                        break;
                    }
                    int idx = 0;
                    for (int id : outs) {
                        if (in.buf[id].host != first[size_t(idx)]) {
                            same = false;
                            msg = fmt("%s differs bitwise (threads %d vs %d)", in.buf[id].name, nt, o.threads);
                        }
                        ++idx;
                    }
                    if (!same) break;
                    if (cpu) detail += fmt("%s %d", nt == threads.front() ? "" : ",", nt);
                }
                if (!ok) record(s, Outcome::FAIL, name, msg);
                else record(s, same ? Outcome::PASS : Outcome::FAIL, name, same ? detail + (in.wants_dbias() ? ": o, lse, dq, dk, dv, dbias bitwise equal" : ": o, lse, dq, dk, dv bitwise equal") : msg);
                continue;
            }
            // ---- test mode
            const auto t_run = std::chrono::steady_clock::now();
            RunTimes rt;
            bool ok = run_lib(ctx.get(), o.backend, in, algo, prec, &unsupported, &resolved, &msg, &rt);
            if (o.verbose)
                std::printf("        %s: run + memory checks %.2f s (fwd %.0f ms, bwd %.0f ms)\n", name.c_str(), seconds_since(t_run),
                            rt.fwd_ms, rt.bwd_ms);
            if (unsupported) {
                // The CPU backend must run every case at F32; a refusal there is a failure.
                bool must = cpu && (prec == FATTN_PREC_AUTO || prec == FATTN_PREC_F32);
                record(s, must ? Outcome::FAIL : Outcome::SKIP, name, msg);
                continue;
            }
            if (!ok) {
                record(s, Outcome::FAIL, name, msg);
                continue;
            }
            std::string jm;
            bool good;
            const auto t_judge = std::chrono::steady_clock::now();
            if (c.large) {
                good = judge_sampled(in, tolerance(resolved, c.dtype), lse_tolerance(resolved), &jm);
            } else {
                if (!have_ref) {
                    run_oracle(in, &ref);
                    have_ref = true;
                }
                good = judge(in, ref, tolerance(resolved, c.dtype), lse_tolerance(resolved), &jm);
            }
            if (o.verbose) std::printf("        %s: judge %.2f s\n", name.c_str(), seconds_since(t_judge));
            record(s, good ? Outcome::PASS : Outcome::FAIL, name, fmt("[%s] ", fattn_prec_name(resolved)) + jm);
        }
    }
    return 0;
}

}  // namespace fattn_test
