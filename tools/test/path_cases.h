// path_cases.h — what the PaTH family's files of fattn-test share (path_cases.cpp, path_large.cpp).
#pragma once

#include <string>
#include <vector>

#include "test/registry.h"

namespace fattn_test {

// One output against its reference: FLA's err_ratio = rms(got - ref) / rms(ref) must be below tol.
struct PathJudged {
    const char *name;
    std::vector<double> got, ref;
    double tol;
};

// Judges every output (a non-finite value or an all-zero reference fails); appends " name ratio"
// to *detail for the first, for dw, for each failure and for all with verbose. True if all pass.
bool judge_ratios(const std::vector<PathJudged> &cs, bool verbose, std::string *detail);

// The --large case (path_large.cpp): tensors of more than 2^31 elements, judged on two batches.
void run_path_large(const Options &o, Summary &sum);

}  // namespace fattn_test
