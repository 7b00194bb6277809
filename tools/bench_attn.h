/* bench_attn.h - `tlm bench attention`: fused attention against Q K^T +
 * softmax + P V, per key length. */
#ifndef TLM_TOOLS_BENCH_ATTN_H
#define TLM_TOOLS_BENCH_ATTN_H

int tlm_cmd_bench_attention(int argc, char **argv);

#endif
