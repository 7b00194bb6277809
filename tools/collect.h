/* collect.h - measured-schedule records (tools). */
#ifndef TLM_TOOLS_COLLECT_H
#define TLM_TOOLS_COLLECT_H

#include <cjson/cJSON.h>

/* `tlm collect` */
int tlm_cmd_collect(int argc, char **argv);

/* Called per record; return non-zero to stop. */
typedef int (*tlm_record_fn)(void *ctx, const cJSON *record);

/* Reads a records file (gzip JSON lines, several members allowed; torn or
 * unknown-version lines are skipped). Returns the number of records, -1 if
 * the file cannot be opened. */
int tlm_records_read(const char *path, tlm_record_fn fn, void *ctx);

#endif
