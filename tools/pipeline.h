/* pipeline.h - the commands of the offline pipeline (tools): each parses
 * argv (the arguments after its name) and returns the exit status: 0, 1
 * (the work failed; a message on stderr), 2 (usage). */
#ifndef TLM_TOOLS_PIPELINE_H
#define TLM_TOOLS_PIPELINE_H

int tlm_cmd_collect(int argc, char **argv);
int tlm_cmd_train(int argc, char **argv);
int tlm_cmd_quantize(int argc, char **argv);
int tlm_cmd_bound(int argc, char **argv);
int tlm_cmd_eval(int argc, char **argv);

#endif
