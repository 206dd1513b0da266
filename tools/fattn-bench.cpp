// fattn-bench — benchmark harness of fattn (DESIGN §7). Every case runs all arms in one process at
// equal shape on the same inputs: fused vs exact (materialized) on the chosen backend, plus cuDNN
// SDPA through cudnn-frontend when built with its headers (CUDA, f16/bf16). Per arm: median time of
// fwd and fwd+bwd (CUDA events with an L2 flush before each rep; steady clock on the CPU), FLOP
// rate (fwd 4·B·Hq·Sq·Skv·D, halved for causal; bwd 2.5× fwd), the bytes kept for the backward
// (fattn_attn_memory saved_bytes), the modelled vs measured peak memory, the resolved precision,
// and a parity line (max rel err of each arm against the exact arm). On the CPU it also prints the
// ISA path the kernels run (fattn_cpu_isa) and, before each case, OpenBLAS SGEMM 2048³ on the same
// threads (when built with OpenBLAS) with the fused fwd+bwd rate as a fraction of it.
//
//   fattn-bench [--backend cpu|cuda] [--preset NAME|list] [--reps N] [--warmup N] [--threads N]
//               [--arms fused,portable,exact,cudnn] [--csv FILE] [--max-err E]
//   fattn-bench --shape B,Sq,Skv,Hq,Hkv,D [--dtype f32|f16|bf16] [--prec auto|f32|tf32|native]
//               [--causal none|tl|br] [--band W] [--window W]     (one custom case)
//   fattn-bench path ...                                          (the PaTH family's bench)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/path_bench.h"

using namespace fbench;

namespace {

void usage() {
    std::printf(
        "usage: fattn-bench [--backend cpu|cuda] [--preset NAME|list] [--reps N] [--warmup N]\n"
        "                   [--threads N] [--arms fused,portable,exact,cudnn] [--csv FILE] [--max-err E]\n"
        "       fattn-bench --shape B,Sq,Skv,Hq,Hkv,D [--dtype f32|f16|bf16]\n"
        "                   [--prec auto|f32|tf32|native] [--causal none|tl|br] [--band W] [--window W]\n"
        "       fattn-bench path ...\n"
        "presets:\n");
    list_presets();
}

bool parse_shape(const char *s, Case *c) {
    long long v[6];
    if (std::sscanf(s, "%lld,%lld,%lld,%lld,%lld,%lld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6)
        return false;
    c->B = v[0]; c->Sq = v[1]; c->Skv = v[2]; c->Hq = v[3]; c->Hkv = v[4]; c->D = v[5];
    return true;
}

const char *causal_name(fattn_causal c) {
    return c == FATTN_CAUSAL_NONE ? "none" : c == FATTN_CAUSAL_TOP_LEFT ? "causal-tl" : "causal-br";
}

std::string mask_desc(const Case &c) {
    std::string m = causal_name(c.causal);
    if (c.band >= 0) m += "+band" + std::to_string(c.band) + "bias";
    if (c.window >= 0) m += "+window" + std::to_string(c.window);
    return m;
}

bool has_arm(const Options &o, const char *a) { return ("," + o.arms + ",").find(std::string(",") + a + ",") != std::string::npos; }

std::string fmt(double x, const char *f) {
    if (x < 0) return "-";
    char b[64];
    std::snprintf(b, sizeof b, f, x);
    return b;
}

double mib(double b) { return b / 1048576.0; }

struct CaseResult {
    Case c;
    std::vector<ArmResult> arms;
    double err_fused = -1, err_cudnn = -1;
    double sgemm = -1;  // CPU: SGEMM GFLOP/s measured right before this case (< 0: none)
    const ArmResult *find(const char *name) const {
        for (const ArmResult &a : arms)
            if (a.arm == name) return &a;
        return nullptr;
    }
};

void print_case(const CaseResult &cr, const Options &opt) {
    const Case &c = cr.c;
    const bool cuda = opt.backend == FATTN_BACKEND_CUDA;
    const double unit = cuda ? 1e12 : 1e9;
    const double ff = fwd_flops(c);
    std::printf("  %-6s %-7s %10s %11s %9s %9s %11s %10s %11s  %s\n", "arm", "prec", "fwd ms",
                "fwd+bwd ms", cuda ? "fwd TF/s" : "fwd GF/s", cuda ? "f+b TF/s" : "f+b GF/s",
                "saved MiB", "peak MiB", "(measured)", "status");
    for (const ArmResult &a : cr.arms) {
        double rf = a.fwd_ms > 0 ? ff / (a.fwd_ms * 1e-3) / unit : -1;
        double rb = a.fwdbwd_ms > 0 ? 3.5 * ff / (a.fwdbwd_ms * 1e-3) / unit : -1;
        std::printf("  %-6s %-7s %10s %11s %9s %9s %11s %10s %11s  %s\n", a.arm.c_str(), a.prec.c_str(),
                    fmt(a.fwd_ms, "%.3f").c_str(), fmt(a.fwdbwd_ms, "%.3f").c_str(),
                    fmt(rf, "%.1f").c_str(), fmt(rb, "%.1f").c_str(),
                    a.saved_bytes ? fmt(mib(double(a.saved_bytes)), "%.1f").c_str() : "-",
                    a.model_peak ? fmt(mib(double(a.model_peak)), "%.1f").c_str() : "-",
                    fmt(a.measured_peak >= 0 ? mib(a.measured_peak) : -1, "%.1f").c_str(), a.status.c_str());
    }
    const ArmResult *fu = cr.find("fused"), *ex = cr.find("exact");
    std::printf("  parity: fused vs exact max rel err %s", fmt(cr.err_fused, "%.2e").c_str());
    if (cr.find("cudnn")) std::printf("; cudnn vs %s %s", ex && ex->have_values ? "exact" : "fused",
                                      fmt(cr.err_cudnn, "%.2e").c_str());
    std::printf("\n");
    if (fu && ex && fu->ok() && ex->ok())
        std::printf("  fused/exact: time fwd %.2fx, fwd+bwd %.2fx; saved bytes %.4fx (%.1f vs %.1f MiB)\n",
                    fu->fwd_ms / ex->fwd_ms, fu->fwdbwd_ms / ex->fwdbwd_ms,
                    double(fu->saved_bytes) / double(ex->saved_bytes), mib(double(fu->saved_bytes)),
                    mib(double(ex->saved_bytes)));
    const ArmResult *cd = cr.find("cudnn");
    if (fu && cd && fu->ok() && cd->ok())
        std::printf("  fused/cudnn: time fwd %.2fx, fwd+bwd %.2fx\n", fu->fwd_ms / cd->fwd_ms,
                    fu->fwdbwd_ms / cd->fwdbwd_ms);
    if (!cuda && cr.sgemm > 0) {
        double rb = fu && fu->ok() ? 3.5 * ff / (fu->fwdbwd_ms * 1e-3) / unit : -1;
        std::printf("  SGEMM %d^3 (same run, just before this case): %.1f GFLOP/s; fused fwd+bwd = %s of it\n",
                    kSgemmN, cr.sgemm, rb > 0 ? fmt(100.0 * rb / cr.sgemm, "%.0f%%").c_str() : "-");
    }
    if (!c.peer.empty()) std::printf("  peers (TARGETS.md, fwd+bwd, other process): %s\n", c.peer.c_str());
    std::fflush(stdout);
}

void print_summary(const std::vector<CaseResult> &all, const Options &opt) {
    const bool cuda = opt.backend == FATTN_BACKEND_CUDA;
    const double unit = cuda ? 1e12 : 1e9;
    std::printf("\n== summary (%s, preset %s): fwd+bwd medians, same process, same inputs\n",
                cuda ? "cuda" : "cpu", opt.preset.c_str());
    std::printf("| case | prec | fused ms | %s | exact ms | fused/exact time | cudnn ms | fused/cudnn | "
                "saved fused/exact MiB | max rel err |%s\n|---|---|---|---|---|---|---|---|---|---|%s\n",
                cuda ? "fused TFLOP/s" : "fused GFLOP/s", cuda ? "" : " SGEMM GFLOP/s | fused/SGEMM |",
                cuda ? "" : "---|---|");
    for (const CaseResult &cr : all) {
        const ArmResult *fu = cr.find("fused"), *ex = cr.find("exact"), *cd = cr.find("cudnn");
        auto ms = [](const ArmResult *a) { return a && a->ok() ? fmt(a->fwdbwd_ms, "%.3f") : std::string(a ? "n/a" : "-"); };
        double rate = fu && fu->ok() ? 3.5 * fwd_flops(cr.c) / (fu->fwdbwd_ms * 1e-3) / unit : -1;
        double r_ex = fu && ex && fu->ok() && ex->ok() ? fu->fwdbwd_ms / ex->fwdbwd_ms : -1;
        double r_cd = fu && cd && fu->ok() && cd->ok() ? fu->fwdbwd_ms / cd->fwdbwd_ms : -1;
        std::string saved = fu && ex && fu->saved_bytes && ex->saved_bytes
                                ? fmt(mib(double(fu->saved_bytes)), "%.1f") + " / " + fmt(mib(double(ex->saved_bytes)), "%.1f")
                                : "-";
        std::printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |", cr.c.name.c_str(),
                    fu ? fu->prec.c_str() : "-", ms(fu).c_str(), fmt(rate, "%.1f").c_str(), ms(ex).c_str(),
                    fmt(r_ex, "%.2fx").c_str(), ms(cd).c_str(), fmt(r_cd, "%.2fx").c_str(), saved.c_str(),
                    fmt(cr.err_fused, "%.1e").c_str());
        if (!cuda)
            std::printf(" %s | %s |", fmt(cr.sgemm, "%.1f").c_str(),
                        fmt(rate > 0 && cr.sgemm > 0 ? rate / cr.sgemm : -1, "%.2f").c_str());
        std::printf("\n");
    }
}

void write_csv(const std::string &path, const std::vector<CaseResult> &all, const Options &opt) {
    FILE *f = std::fopen(path.c_str(), "w");
    if (!f) {
        std::fprintf(stderr, "fattn-bench: cannot write %s\n", path.c_str());
        return;
    }
    std::fprintf(f, "preset,backend,case,site,arm,dtype,prec,B,Sq,Skv,Hq,Hkv,D,mask,fwd_ms,fwdbwd_ms,"
                    "fwd_flop,fwdbwd_flop,saved_bytes,model_peak_bytes,measured_peak_bytes,"
                    "max_rel_err_vs_exact,status\n");
    for (const CaseResult &cr : all) {
        const Case &c = cr.c;
        for (const ArmResult &a : cr.arms) {
            double err = a.arm == "fused" ? cr.err_fused : a.arm == "cudnn" ? cr.err_cudnn : 0.0;
            std::string status = a.status;
            for (char &ch : status)
                if (ch == ',' || ch == '\n') ch = ';';
            std::fprintf(f, "%s,%s,\"%s\",%s,%s,%s,%s,%lld,%lld,%lld,%lld,%lld,%lld,%s,%.6f,%.6f,%.6g,%.6g,"
                            "%llu,%llu,%.0f,%.3e,%s\n",
                         opt.preset.c_str(), opt.backend == FATTN_BACKEND_CUDA ? "cuda" : "cpu",
                         c.name.c_str(), c.site.c_str(), a.arm.c_str(), fattn_dtype_name(c.dtype),
                         a.prec.c_str(), (long long)c.B, (long long)c.Sq, (long long)c.Skv,
                         (long long)c.Hq, (long long)c.Hkv, (long long)c.D, mask_desc(c).c_str(),
                         a.fwd_ms, a.fwdbwd_ms, fwd_flops(c), 3.5 * fwd_flops(c),
                         (unsigned long long)a.saved_bytes, (unsigned long long)a.model_peak,
                         a.measured_peak, err, status.c_str());
        }
    }
    std::fclose(f);
    std::printf("csv: %s\n", path.c_str());
}

}  // namespace

int main(int argc, char **argv) {
    if (argc > 1 && std::strcmp(argv[1], "path") == 0) {
        if (!fattn_bench_path_main) {
            std::printf("path bench not built\n");
            return 2;
        }
        return fattn_bench_path_main(argc - 1, argv + 1);
    }
    Options opt;
    double max_err = -1;  // > 0: exit 1 when an arm's parity error against exact exceeds it
    Case custom;
    bool have_custom = false;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> const char * {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "fattn-bench: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--backend") {
            std::string b = next();
            if (b == "cpu") opt.backend = FATTN_BACKEND_CPU;
            else if (b == "cuda") opt.backend = FATTN_BACKEND_CUDA;
            else { std::fprintf(stderr, "fattn-bench: unknown backend %s\n", b.c_str()); return 2; }
        } else if (a == "--preset") {
            opt.preset = next();
        } else if (a == "--reps") {
            opt.reps = std::atoi(next());
        } else if (a == "--warmup") {
            opt.warmup = std::atoi(next());
        } else if (a == "--threads") {
            opt.threads = std::atoi(next());
            opt.threads_set = true;
        } else if (a == "--arms") {
            opt.arms = next();
        } else if (a == "--max-err") {
            max_err = std::atof(next());
        } else if (a == "--csv") {
            opt.csv = next();
        } else if (a == "--shape") {
            if (!parse_shape(next(), &custom)) { std::fprintf(stderr, "fattn-bench: --shape B,Sq,Skv,Hq,Hkv,D\n"); return 2; }
            have_custom = true;
        } else if (a == "--dtype") {
            std::string d = next();
            custom.dtype = d == "bf16" ? FATTN_BF16 : d == "f16" ? FATTN_F16 : FATTN_F32;
        } else if (a == "--prec") {
            std::string d = next();
            custom.prec = d == "f32" ? FATTN_PREC_F32 : d == "tf32" ? FATTN_PREC_TF32
                        : d == "native" ? FATTN_PREC_NATIVE : FATTN_PREC_AUTO;
        } else if (a == "--causal") {
            std::string d = next();
            custom.causal = d == "tl" ? FATTN_CAUSAL_TOP_LEFT : d == "br" ? FATTN_CAUSAL_BOTTOM_RIGHT : FATTN_CAUSAL_NONE;
        } else if (a == "--band") {
            custom.band = std::atoll(next());
        } else if (a == "--window") {
            custom.window = std::atoll(next());
        } else if (a == "-h" || a == "--help") {
            usage();
            return 0;
        } else {
            std::fprintf(stderr, "fattn-bench: unknown argument %s\n", a.c_str());
            usage();
            return 2;
        }
    }
    if (opt.preset == "list") {
        list_presets();
        return 0;
    }
    std::vector<Case> cases;
    if (have_custom) {
        custom.name = "custom";
        custom.site = "custom";
        opt.preset = "custom";
        cases.push_back(custom);
    } else if (!preset_cases(opt.preset, opt.backend, &cases, &opt)) {
        std::fprintf(stderr, "fattn-bench: unknown preset %s\n", opt.preset.c_str());
        usage();
        return 2;
    }
    const bool cuda = opt.backend == FATTN_BACKEND_CUDA;
    if (cuda && !dev::cuda_built()) {
        std::printf("fattn-bench: built without CUDA; --backend cuda is unavailable\n");
        return 2;
    }
    if (cuda && !dev::has_device()) {  // CI compiles CUDA but has no GPU: say so, do not fail
        std::printf("fattn-bench: skipped: no CUDA device\n");
        return 0;
    }
    std::printf("fattn-bench %s | backend %s | %s | preset %s | %zu cases | arms %s%s\n", fattn_version(),
                cuda ? "cuda" : "cpu",
                cuda ? dev::device_name().c_str()
                     : ("threads " + (opt.threads > 0 ? std::to_string(opt.threads) : std::string("hw"))).c_str(),
                opt.preset.c_str(), cases.size(), opt.arms.c_str(),
                cuda && has_arm(opt, "cudnn") && !cudnn_built() ? " (cudnn: not built)" : "");
    if (!cuda)
        std::printf("cpu isa: %s (fattn_cpu_isa; FATTN_CPU_ISA caps it) | SGEMM ceiling: %s\n", fattn_cpu_isa(),
                    sgemm_name().c_str());
    std::printf("FLOPs: fwd 4·B·Hq·Sq·Skv·D (halved for causal), fwd+bwd 3.5x fwd; medians; "
                "%s\n", cuda ? "CUDA events, L2 flushed before each rep" : "steady clock");
    std::vector<CaseResult> all;
    const auto t_start = std::chrono::steady_clock::now();
    for (size_t ci = 0; ci < cases.size(); ++ci) {
        const Case &c = cases[ci];
        double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
        std::printf("\n[%zu/%zu] %s  (B%lld Sq%lld Skv%lld Hq%lld/Hkv%lld D%lld %s %s)  t=%.0fs\n", ci + 1,
                    cases.size(), c.name.c_str(), (long long)c.B, (long long)c.Sq, (long long)c.Skv,
                    (long long)c.Hq, (long long)c.Hkv, (long long)c.D, fattn_dtype_name(c.dtype),
                    mask_desc(c).c_str(), el);
        std::fflush(stdout);
        CaseResult cr;
        cr.c = c;
        HostData in = make_inputs(c, 1234 + ci);
        if (!cuda && sgemm_built()) cr.sgemm = sgemm_gflops(opt.threads, kSgemmN, 3);
        if (has_arm(opt, "fused")) cr.arms.push_back(run_fattn_arm(c, opt, FATTN_ALGO_FUSED, in));
        if (cuda && has_arm(opt, "portable"))
            cr.arms.push_back(run_fattn_arm(c, opt, FATTN_ALGO_FUSED, in, FATTN_CUDA_FAMILY_PORTABLE));
        if (has_arm(opt, "exact")) cr.arms.push_back(run_fattn_arm(c, opt, FATTN_ALGO_EXACT, in));
        if (cuda && has_arm(opt, "cudnn")) cr.arms.push_back(run_cudnn_arm(c, opt, in));
        const ArmResult *fu = cr.find("fused"), *ex = cr.find("exact"), *cd = cr.find("cudnn");
        if (fu && ex) cr.err_fused = max_rel_err(*fu, *ex, true);
        if (cd) {
            const ArmResult *ref = ex && ex->have_values ? ex : fu;
            if (ref) cr.err_cudnn = max_rel_err(*cd, *ref, false);
        }
        // Drop the result tensors: only the numbers are needed from here on.
        for (ArmResult &a : cr.arms) a.o = a.lse = a.dq = a.dk = a.dv = {};
        print_case(cr, opt);
        all.push_back(cr);
    }
    if (!opt.csv.empty()) write_csv(opt.csv, all, opt);
    print_summary(all, opt);
    int failed = 0, parity_bad = 0;
    for (const CaseResult &cr : all) {
        for (const ArmResult &a : cr.arms)
            if (a.status.rfind("error", 0) == 0) ++failed;
        // An unmeasurable error (< 0) with both arms ok is also a failure: values were lost.
        const ArmResult *fu = cr.find("fused"), *ex = cr.find("exact");
        if (max_err > 0 && fu && ex && fu->ok() && ex->ok() && !(cr.err_fused >= 0 && cr.err_fused <= max_err))
            ++parity_bad;
    }
    std::printf("fattn-bench: %zu cases, %d arm errors", all.size(), failed);
    if (max_err > 0) std::printf(", %d over --max-err %.1e", parity_bad, max_err);
    std::printf("\n");
    return failed || parity_bad ? 1 : 0;
}
