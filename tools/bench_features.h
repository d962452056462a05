/*
 * bench_features.h - the score-feature benchmark that `clflash-bench --features` runs
 * (bench_features.c).
 */
#ifndef CLFLASH_BENCH_FEATURES_H
#define CLFLASH_BENCH_FEATURES_H

/* Parses the whole command line (which contains --features) and runs the benchmark; returns the
 * process's exit status (0, 1 for a failed run, 2 for a usage error). */
int bench_features_main(int argc, char **argv);

#endif /* CLFLASH_BENCH_FEATURES_H */
