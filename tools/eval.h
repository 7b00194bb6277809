/* eval.h - `tlm eval` (tools). */
#ifndef TLM_TOOLS_EVAL_H
#define TLM_TOOLS_EVAL_H

int tlm_cmd_eval(int argc, char **argv);

#endif
