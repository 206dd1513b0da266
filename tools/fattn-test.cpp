// fattn-test — the parity harness (DESIGN §6), modeled on ggml's test-backend-ops.
//
//   fattn-test [test|grad|determinism|support|perf|selftest] [--backend cpu|cuda] [--prec auto|f32|tf32|native]
//              [--algo fused|exact|both] [--extra] [--large] [--quick] [--bench] [-p REGEX]
//              [--threads N] [-v]
//
// Each registered family (tools/test/registry.h; softmax attention in tools/test/attn_*.cpp)
// runs its declarative case table in the chosen mode and prints one line per case; the last
// line is "N passed, N failed[, N skipped]" and the exit status is non-zero if anything failed.
// The library is reached only through include/fattn/fattn.h; the reference is the float64
// oracle of src/cpu/ref/.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>

#include "test/registry.h"

using namespace fattn_test;

static void usage() {
    std::printf(
        "usage: fattn-test [MODE] [options]\n"
        "modes: test (default) | grad | determinism | support | perf | selftest\n"
        "  --backend cpu|cuda   backend under test (default cpu); cuda fails if unavailable\n"
        "  --prec auto|f32|tf32|native  override every case's precision (default: the case's)\n"
        "  --algo fused|exact|both      (default both)\n"
        "  --extra               also run the cases marked extra\n"
        "  --large               also run the large cases (S >= 16k; CUDA)\n"
        "  --quick               only the quick subset (sanitizer builds)\n"
        "  --bench               same as the perf mode\n"
        "  -p REGEX              only cases whose name matches\n"
        "  --threads N           CPU threads (default 2)\n"
        "  --family auto|portable|sm90  CUDA kernel family (fattn_ctx_set_cuda_family; default auto)\n"
        "  -v                    verbose\n");
}

static bool parse(int argc, char **argv, Options *o) {
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&](const char *what) -> const char * {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "fattn-test: %s needs a value\n", what);
                return nullptr;
            }
            return argv[++i];
        };
        if (a == "test") o->mode = Mode::TEST;
        else if (a == "grad") o->mode = Mode::GRAD;
        else if (a == "determinism") o->mode = Mode::DETERMINISM;
        else if (a == "support") o->mode = Mode::SUPPORT;
        else if (a == "perf" || a == "--bench") o->mode = Mode::PERF;
        else if (a == "selftest") o->mode = Mode::SELFTEST;
        else if (a == "--backend") {
            const char *v = next("--backend");
            if (!v) return false;
            if (!std::strcmp(v, "cpu")) o->backend = BackendKind::CPU;
            else if (!std::strcmp(v, "cuda")) o->backend = BackendKind::CUDA;
            else return std::fprintf(stderr, "fattn-test: unknown backend '%s'\n", v), false;
        } else if (a == "--prec") {
            const char *v = next("--prec");
            if (!v) return false;
            if (!std::strcmp(v, "auto")) o->prec = FATTN_PREC_AUTO;
            else if (!std::strcmp(v, "f32")) o->prec = FATTN_PREC_F32;
            else if (!std::strcmp(v, "tf32")) o->prec = FATTN_PREC_TF32;
            else if (!std::strcmp(v, "native")) o->prec = FATTN_PREC_NATIVE;
            else return std::fprintf(stderr, "fattn-test: unknown precision '%s'\n", v), false;
        } else if (a == "--algo") {
            const char *v = next("--algo");
            if (!v) return false;
            if (!std::strcmp(v, "fused")) o->algo_fused = true, o->algo_exact = false;
            else if (!std::strcmp(v, "exact")) o->algo_fused = false, o->algo_exact = true;
            else if (!std::strcmp(v, "both")) o->algo_fused = o->algo_exact = true;
            else return std::fprintf(stderr, "fattn-test: unknown algo '%s'\n", v), false;
        } else if (a == "--extra") o->extra = true;
        else if (a == "--large") o->large = true;
        else if (a == "--quick") o->quick = true;
        else if (a == "-v") o->verbose = true;
        else if (a == "-p") {
            const char *v = next("-p");
            if (!v) return false;
            try {
                std::regex re(v);
            } catch (const std::regex_error &) {
                return std::fprintf(stderr, "fattn-test: bad regex '%s'\n", v), false;
            }
            o->pattern = v;
        } else if (a == "--threads") {
            const char *v = next("--threads");
            if (!v) return false;
            o->threads = std::atoi(v);
            if (o->threads < 1) return std::fprintf(stderr, "fattn-test: --threads must be >= 1\n"), false;
        } else if (a == "--family") {
            const char *v = next("--family");
            if (!v) return false;
            if (!std::strcmp(v, "auto")) o->family = FATTN_CUDA_FAMILY_AUTO;
            else if (!std::strcmp(v, "portable")) o->family = FATTN_CUDA_FAMILY_PORTABLE;
            else if (!std::strcmp(v, "sm90")) o->family = FATTN_CUDA_FAMILY_SM90;
            else return std::fprintf(stderr, "fattn-test: unknown family '%s'\n", v), false;
        } else if (a == "-h" || a == "--help") {
            usage();
            std::exit(0);
        } else {
            std::fprintf(stderr, "fattn-test: unknown argument '%s'\n", a.c_str());
            return false;
        }
    }
    return true;
}

int main(int argc, char **argv) {
    Options o;
    if (!parse(argc, argv, &o)) {
        usage();
        return 2;
    }
    // The CPU ISA path is named so a CI log says which kernels were checked (FATTN_CPU_ISA caps it).
    std::printf("fattn-test %s: backend %s%s%s, %d famil%s\n", mode_name(o.mode),
                o.backend == BackendKind::CPU ? "cpu" : "cuda", o.backend == BackendKind::CPU ? ", cpu isa " : "",
                o.backend == BackendKind::CPU ? fattn_cpu_isa() : "", family_count(),
                family_count() == 1 ? "y" : "ies");
    Summary s;
    int rc = 0;
    for (int i = 0; i < family_count(); ++i) {
        const Family &f = family_at(i);
        std::printf("[%s]\n", f.name);
        if (f.run(o, s) != 0) rc = 1;
    }
    if (s.skipped) std::printf("%d passed, %d failed, %d skipped\n", s.passed, s.failed, s.skipped);
    else std::printf("%d passed, %d failed\n", s.passed, s.failed);
    return (s.failed > 0 || rc != 0) ? 1 : 0;
}
