/* adapt.h - `tlm adapt` (tools). */
#ifndef TLM_TOOLS_ADAPT_H
#define TLM_TOOLS_ADAPT_H

/* `tlm adapt`: measures schedules on this machine and fine-tunes the base
 * model into one that tlm_create loads by default here (tools/adapt.c).
 * Returns the process exit status: 0, 1 (failure), 2 (usage). */
int tlm_cmd_adapt(int argc, char **argv);

#endif
