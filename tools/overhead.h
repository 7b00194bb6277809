/* overhead.h - `tlm bench overhead` (tools). */
#ifndef TLM_TOOLS_OVERHEAD_H
#define TLM_TOOLS_OVERHEAD_H

int tlm_cmd_bench_overhead(int argc, char **argv);

#endif
