// path_bench.h — plug-in point of `fattn-bench path ...` (the PaTH family's benchmark).
//
// Declared weak so fattn-bench links whether or not tools/bench/path_bench.cpp (engineer "path")
// exists: when it does not, the symbol is null and fattn-bench prints "path bench not built" and
// exits with status 2.
#pragma once

#if defined(__GNUC__)
#define FATTN_BENCH_WEAK __attribute__((weak))
#else
#define FATTN_BENCH_WEAK
#endif

extern "C" int fattn_bench_path_main(int argc, char **argv) FATTN_BENCH_WEAK;
