/*
 * bench_varlen.h - the variable-length prefill benchmark that `clflash-bench --varlen` runs
 * (bench_varlen.c).
 */
#ifndef CLFLASH_BENCH_VARLEN_H
#define CLFLASH_BENCH_VARLEN_H

/* Parses the whole command line (which contains --varlen) and runs the benchmark; returns the
 * process's exit status (0, 1 for a failed run or a check that failed, 2 for a usage error). */
int bench_varlen_main(int argc, char **argv);

#endif /* CLFLASH_BENCH_VARLEN_H */
