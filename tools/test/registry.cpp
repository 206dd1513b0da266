// registry.cpp — the family list and the per-case line printer behind registry.h.
#include "test/registry.h"

#include <cstdio>
#include <regex>
#include <vector>

namespace fattn_test {

namespace {
// Function-local static: safe to use from other translation units' static initializers.
std::vector<Family> &families() {
    static std::vector<Family> f;
    return f;
}
}  // namespace

bool register_family(Family f) {
    families().push_back(f);
    return true;
}

int family_count() { return int(families().size()); }
const Family &family_at(int i) { return families()[size_t(i)]; }

void record(Summary &s, Outcome r, const std::string &name, const std::string &detail) {
    const char *tag = r == Outcome::PASS ? "OK  " : r == Outcome::FAIL ? "FAIL" : "SKIP";
    std::printf("  %s  %-48s %s\n", tag, name.c_str(), detail.c_str());
    std::fflush(stdout);
    if (r == Outcome::PASS) ++s.passed;
    else if (r == Outcome::FAIL) ++s.failed;
    else ++s.skipped;
}

bool selected(const Options &o, const std::string &name) {
    if (o.pattern.empty()) return true;
    return std::regex_search(name, std::regex(o.pattern));
}

bool explicitly_requested(const Options &o) { return !o.pattern.empty(); }

const char *mode_name(Mode m) {
    switch (m) {
    case Mode::TEST: return "test";
    case Mode::GRAD: return "grad";
    case Mode::DETERMINISM: return "determinism";
    case Mode::SUPPORT: return "support";
    case Mode::PERF: return "perf";
    case Mode::SELFTEST: return "selftest";
    }
    return "?";
}

}  // namespace fattn_test
