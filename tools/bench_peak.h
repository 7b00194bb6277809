/* bench_peak.h - `tlm bench peak`: measured FMA peak and read bandwidth. */
#ifndef TLM_TOOLS_BENCH_PEAK_H
#define TLM_TOOLS_BENCH_PEAK_H

int tlm_cmd_bench_peak(int argc, char **argv);

#endif
