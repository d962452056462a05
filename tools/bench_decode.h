/*
 * bench_decode.h - the decoding benchmark that `clflash-bench --decode` runs (bench_decode.c).
 */
#ifndef CLFLASH_BENCH_DECODE_H
#define CLFLASH_BENCH_DECODE_H

/* Parses the whole command line (which contains --decode) and runs the decoding benchmark; returns
 * the process's exit status (0, 1 for a failed run, 2 for a usage error). */
int bench_decode_main(int argc, char **argv);

#endif /* CLFLASH_BENCH_DECODE_H */
