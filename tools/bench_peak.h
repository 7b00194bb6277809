/* bench_peak.h - `tlm bench peak`: measured FMA peak and read bandwidth. */
#ifndef TLM_TOOLS_BENCH_PEAK_H
#define TLM_TOOLS_BENCH_PEAK_H

int tlm_cmd_bench_peak(int argc, char **argv);

/* Measured FMA GFLOPS of `threads` threads at `isa` (tlm_isa), the best of
 * 3 runs over about `seconds` in all: the peak of a roofline. */
double tlm_peak_fma_gflops(int isa, int threads, double seconds);

/* Measured read bandwidth (GB/s) of `threads` threads streaming 256 MiB at
 * `isa`, the best of 2 runs (about 1 s): the slope of a roofline. */
double tlm_peak_read_gbs(int isa, int threads);

#endif
