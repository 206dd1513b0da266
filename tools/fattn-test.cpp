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
#include <initializer_list>
#include <regex>
#include <string>
#include <utility>

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

// *out = the value named v among names; else "unknown <kind> 'v'" and false.
template <class E>
static bool pick(const char *v, const char *kind, std::initializer_list<std::pair<const char *, E>> names,
                 E *out) {
    for (const auto &n : names)
        if (!std::strcmp(v, n.first)) {
            *out = n.second;
            return true;
        }
    std::fprintf(stderr, "fattn-test: unknown %s '%s'\n", kind, v);
    return false;
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
            if (!v || !pick<BackendKind>(v, "backend", {{"cpu", BackendKind::CPU}, {"cuda", BackendKind::CUDA}},
                                         &o->backend))
                return false;
        } else if (a == "--prec") {
            const char *v = next("--prec");
            if (!v || !pick<fattn_prec>(v, "precision",
                                        {{"auto", FATTN_PREC_AUTO}, {"f32", FATTN_PREC_F32},
                                         {"tf32", FATTN_PREC_TF32}, {"native", FATTN_PREC_NATIVE}},
                                        &o->prec))
                return false;
        } else if (a == "--algo") {
            const char *v = next("--algo");
            int algos = 0;  // bit 0: fused, bit 1: exact
            if (!v || !pick<int>(v, "algo", {{"fused", 1}, {"exact", 2}, {"both", 3}}, &algos)) return false;
            o->algo_fused = algos & 1, o->algo_exact = algos & 2;
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
            if (!v || !pick<fattn_cuda_family>(v, "family",
                                               {{"auto", FATTN_CUDA_FAMILY_AUTO},
                                                {"portable", FATTN_CUDA_FAMILY_PORTABLE},
                                                {"sm90", FATTN_CUDA_FAMILY_SM90}},
                                               &o->family))
                return false;
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
