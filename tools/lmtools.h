/* lmtools.h - `tlm explain` and `tlm bench decode` (tools). */
#ifndef TLM_TOOLS_LMTOOLS_H
#define TLM_TOOLS_LMTOOLS_H

int tlm_cmd_explain(int argc, char **argv);
int tlm_cmd_bench_decode(int argc, char **argv);

#endif
