// registry.h — how a family of cases plugs into fattn-test (tools/fattn-test.cpp).
//
// fattn-test parses the command line into one Options, then, for the chosen mode, calls run() of
// every registered Family in registration order; each family runs its own case table (filtered by
// -p with selected()), prints one line per case through record(), and adds to the one Summary that
// main() prints last as "N passed, N failed[, N skipped]".
//
// A family registers itself from a static initializer in its own .cpp under tools/test/:
//
//   static int run_path(const fattn_test::Options &o, fattn_test::Summary &s) { ... return 0; }
//   static const bool registered = fattn_test::register_family({"path", run_path});
//
// run() returns 0, or non-zero for a harness-level error (bad options for this family); case
// failures go into the Summary, never into the return value.
#pragma once

#include <cstdint>
#include <string>

#include "fattn/fattn.h"

namespace fattn_test {

// SELFTEST: the harness checks itself (injected faults must be caught); a family may ignore it.
enum class Mode { TEST, GRAD, DETERMINISM, SUPPORT, PERF, SELFTEST };
enum class BackendKind { CPU, CUDA };

struct Options {
    Mode mode = Mode::TEST;
    BackendKind backend = BackendKind::CPU;
    fattn_prec prec = FATTN_PREC_AUTO;  // --prec auto|f32|tf32|native (AUTO keeps each case's own)
    bool algo_fused = true;             // --algo fused|exact|both (default both)
    bool algo_exact = true;
    bool extra = false;                 // --extra: also the cases marked extra
    bool large = false;                 // --large: also the cases marked large
    bool quick = false;                 // --quick: a small subset (sanitizer builds, ctest -L quick)
    bool verbose = false;               // -v
    int threads = 2;                    // --threads N (CPU context)
    fattn_cuda_family family = FATTN_CUDA_FAMILY_AUTO;  // --family auto|portable|sm90 (CUDA)
    std::string pattern;                // -p REGEX ("" = all); ECMAScript, searched in the name
};

struct Summary {
    int passed = 0;
    int failed = 0;
    int skipped = 0;
};

enum class Outcome { PASS, FAIL, SKIP };

// Print the one line of a case ("  OK    name  detail" / "  FAIL  name  detail" / "  SKIP ...")
// and count it.
void record(Summary &s, Outcome r, const std::string &name, const std::string &detail);

// True if a case name passes the -p filter (always true without -p).
bool selected(const Options &o, const std::string &name);

// True if -p was given: large cases then run on the CPU too when the pattern names them.
bool explicitly_requested(const Options &o);

struct Family {
    const char *name;
    int (*run)(const Options &o, Summary &s);
};

bool register_family(Family f);

// Families in registration order (the softmax-attention family is registered by attn_cases.cpp).
int family_count();
const Family &family_at(int i);

const char *mode_name(Mode m);

}  // namespace fattn_test
