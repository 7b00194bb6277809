/* cachecmd.h - `tlm cache` (tools). */
#ifndef TLM_TOOLS_CACHECMD_H
#define TLM_TOOLS_CACHECMD_H

int tlm_cmd_cache(int argc, char **argv);

#endif
