/* bench_kernels.h - `tlm bench kernels`: TLM-1, the rule, a search tuner
 * and oneDNN per task, checked and timed side by side (issue #18). */
#ifndef TLM_TOOLS_BENCH_KERNELS_H
#define TLM_TOOLS_BENCH_KERNELS_H

/* argv: the options after "bench kernels"; exec_argv: the whole command
 * line (oneDNN's OpenMP thread count is fixed by re-running it with
 * OMP_NUM_THREADS set). Returns the exit status. */
int tlm_cmd_bench_kernels(int argc, char **argv, char **exec_argv);

#endif
