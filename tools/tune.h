/* tune.h - `tlm tune`: measured tuning of benchdnn shapes into the disk
 * cache (tools). */
#ifndef TLM_TOOLS_TUNE_H
#define TLM_TOOLS_TUNE_H

/* argv after "tune". Returns the exit status: 0, 1 (a file, task or
 * candidate failed; the others are still tuned), 2 (usage). */
int tlm_cmd_tune(int argc, char **argv);

#endif
