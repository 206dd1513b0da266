// case_runner.h — what the fattn_ggml test executables share: a failure counter with EXPECT
// (report and count, never abort), and main()'s body over a table of named cases:
//   EXE --list | EXE CASE | EXE all | EXE --check-list CASE...  (the build's list == the table)
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace fattn_ggml_test {

inline int g_failures = 0;

struct Case {
    const char *name;
    void (*fn)();
};

// Runs argv's request over cases[0, n); the process's exit code.
inline int run_cases(int argc, char **argv, const Case *cases, size_t n) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    if (argc >= 2 && std::string(argv[1]) == "--check-list") {
        std::vector<std::string> listed(argv + 2, argv + argc), have;
        for (size_t i = 0; i < n; ++i) have.push_back(cases[i].name);
        if (listed == have) return 0;
        std::fprintf(stderr, "the CMake case list differs from the executable's (--list)\n");
        return 1;
    }
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s CASE | all | --list | --check-list CASE...\n", argv[0]);
        return 2;
    }
    const std::string want = argv[1];
    if (want == "--list") {
        for (size_t i = 0; i < n; ++i) std::printf("%s\n", cases[i].name);
        return 0;
    }
    int ran = 0;
    for (size_t i = 0; i < n; ++i) {
        if (want != "all" && want != cases[i].name) continue;
        const int before = g_failures;
        std::printf("[%s]\n", cases[i].name);
        cases[i].fn();
        std::printf("[%s] %s\n", cases[i].name, g_failures == before ? "ok" : "FAILED");
        ++ran;
    }
    if (!ran) {
        std::fprintf(stderr, "no case '%s' (--list)\n", want.c_str());
        return 2;
    }
    return g_failures ? 1 : 0;
}

}  // namespace fattn_ggml_test

#define EXPECT(cond, ...)                                                          \
    do {                                                                           \
        if (!(cond)) {                                                             \
            std::fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            std::fprintf(stderr, __VA_ARGS__);                                     \
            std::fprintf(stderr, "\n");                                            \
            ++fattn_ggml_test::g_failures;                                         \
        }                                                                          \
    } while (0)
