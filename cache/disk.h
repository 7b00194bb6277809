/* disk.h - the on-disk kernel cache (internal).
 *
 * Layout under the cache directory:
 *   plans/<hash>.json    shape key -> decisions (so a restart decodes nothing)
 *   kernels/<hash>.o     object code of a schedule key's kernel
 *   kernels/<hash>.json  its metadata: format, full key (hex), versions,
 *                        problem (benchdnn form), decisions, symbol, the
 *                        object's XXH3-64 and size, creation time
 * Every file is written to a private temporary file (mkstemp, mode 0600)
 * and published by rename(2), so readers never see a partial entry; the
 * object is published before its metadata. Nothing read is trusted: the
 * directory and each file must belong to the current user, must not be
 * group- or world-writable and must not be symbolic links; metadata must
 * parse, name this format version and the full key, and the object must
 * match its size and checksum. Any failure is a miss (and one warning).
 *
 * Trust model: the checks keep out damage, races and other users. They do
 * not authenticate the writer: anyone who can write the directory as this
 * user can make tlm run their object code (as they could replace the
 * user's programs). Keep the directory private; `none` turns the disk
 * cache off. */
#ifndef TLM_CACHE_DISK_H
#define TLM_CACHE_DISK_H

#include <stddef.h>
#include <stdint.h>

#include "key.h"

#define TLM_DISK_FORMAT 1

typedef struct tlm_disk tlm_disk;

/* Warning sink: called once per distinct problem kind. */
typedef void (*tlm_disk_warn_fn)(void *user, const char *message);

/* Opens (creating with mode 0700 if missing) the directory. Returns 0, or
 * -1 with a message when it cannot be used (then there is no disk cache). */
int tlm_disk_open(const char *dir, int64_t max_bytes, tlm_disk_warn_fn warn, void *user,
                  tlm_disk **out, char *err, int errcap);
void tlm_disk_close(tlm_disk *d);
const char *tlm_disk_dir(const tlm_disk *d);

/* Plan entries. load returns 0 and the schedule on a verified hit. */
int tlm_disk_load_plan(tlm_disk *d, const tlm_key *key, tlm_schedule *out);
int tlm_disk_store_plan(tlm_disk *d, const tlm_key *key, const tlm_schedule *s,
                        const char *problem);

/* Kernel entries. load returns 0 with a malloc'd object and its symbol. */
int tlm_disk_load_kernel(tlm_disk *d, const tlm_key *key, void **obj, size_t *len,
                         char *symbol, int symcap);
int tlm_disk_store_kernel(tlm_disk *d, const tlm_key *key, const void *obj, size_t len,
                          const char *symbol, const char *problem, const char *decisions);

/* Totals of the directory (entries, bytes). */
typedef struct tlm_disk_stats {
  int64_t plans, kernels, bytes;
} tlm_disk_stats;
void tlm_disk_stat(tlm_disk *d, tlm_disk_stats *out);

/* Deletes the oldest kernels until the directory is under max_bytes. */
void tlm_disk_trim(tlm_disk *d);

/* Resolves the directory from a configured path, $TLM_CACHE_DIR,
 * $XDG_CACHE_HOME/tlm or $HOME/.cache/tlm, into buf. Returns buf or NULL. */
char *tlm_disk_default_dir(const char *configured, char *buf, size_t cap);

#endif
