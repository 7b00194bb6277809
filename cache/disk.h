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

/* Plan entries. load returns 0 and the schedule on a verified hit, with
 * *measured (when not NULL) 1 for a plan chosen by measurement.
 * store: measured_ns > 0 marks a plan chosen by measurement (`tlm tune`:
 * "measured": true and the winner's median time per call in "kernel_ns");
 * 0 a plan that was only predicted (model or rule). A later store of the
 * same key replaces the entry. */
int tlm_disk_load_plan(tlm_disk *d, const tlm_key *key, tlm_schedule *out, int *measured);
int tlm_disk_store_plan(tlm_disk *d, const tlm_key *key, const tlm_schedule *s,
                        const char *problem, double measured_ns);

/* Kernel entries. load returns 0 with a malloc'd object and its symbol. */
int tlm_disk_load_kernel(tlm_disk *d, const tlm_key *key, void **obj, size_t *len,
                         char *symbol, int symcap);
int tlm_disk_store_kernel(tlm_disk *d, const tlm_key *key, const void *obj, size_t len,
                          const char *symbol, const char *problem, const char *decisions);

/* Totals of the directory (entries, bytes): only the cache's own files
 * (tlm_disk_entry_name) are counted. */
typedef struct tlm_disk_stats {
  int64_t plans, kernels, bytes;
} tlm_disk_stats;
void tlm_disk_stat(tlm_disk *d, tlm_disk_stats *out);

/* What a file name in plans/ or kernels/ is to the cache: an object
 * ("<32 hex>.o"), metadata or a plan ("<32 hex>.json"), a temporary of a
 * store (".tmp-" and six letters or digits), or 0: not the cache's, and
 * never counted, trimmed or removed by it. */
enum { TLM_DISK_NAME_OBJECT = 1, TLM_DISK_NAME_META = 2, TLM_DISK_NAME_TEMP = 3 };
int tlm_disk_entry_name(const char *name);

/* Temporaries older than this (seconds) belong to a writer that died. */
#define TLM_DISK_TEMP_STALE_S 3600
/* A trim goes down to max_bytes less 1/TLM_DISK_TRIM_SLACK of it, so that
 * stores then run a while without another pass. */
#define TLM_DISK_TRIM_SLACK 8

/* Size control. Stores keep a running total in memory; the first store of
 * an open cache, and any that takes the total past max_bytes, start one
 * trim pass on a thread of its own (the store does not wait): the pass
 * lists both folders once, removes stale temporaries, and when over
 * max_bytes removes whole entries oldest first down to the low-water mark.
 * tlm_disk_trim runs a pass now and waits for it; tlm_disk_wait_trim waits
 * for a running one (tlm_disk_close does); tlm_disk_trims counts passes. */
void tlm_disk_trim(tlm_disk *d);
void tlm_disk_wait_trim(tlm_disk *d);
int64_t tlm_disk_trims(tlm_disk *d);

/* Lifetime counters of the runtimes that used a cache directory, kept in
 * <dir>/stats.json: each runtime adds its own at tlm_destroy, under an
 * exclusive flock (so concurrent processes lose no update); `tlm cache
 * stats` reads them under a shared one. hits + misses + waits = runs for
 * every runtime, so for the sum too. */
typedef struct tlm_disk_usage {
  int64_t processes; /* runtimes that added their counters */
  int64_t runs, hits, misses, waits;
  int64_t compiles, evictions, disk_plan_hits, disk_kernel_hits;
  double compile_ms, disk_load_ms;
} tlm_disk_usage;

/* Adds *u to the directory's counters. A damaged or foreign stats file
 * (not a private regular file of this user, or not the counters) is
 * started afresh, with a warning. Returns 0, -1 (I/O). Thread-safe. */
int tlm_disk_add_usage(tlm_disk *d, const tlm_disk_usage *u);

/* Reads the counters of the cache directory `dir` into *out (zeros when
 * there are none yet). Returns 1 when found, 0 when none, -1 when the file
 * is unsafe or damaged. */
int tlm_disk_read_usage(const char *dir, tlm_disk_usage *out);

/* Creates the missing directories above the last component of `path`
 * (mkdir -p of its parent, each new one with mode 0700); ownership is not
 * checked here (tlm_disk_open checks the cache directory itself). Returns
 * 0, or -1 when one could not be created. */
int tlm_disk_make_parents(const char *path);

/* Resolves the directory from a configured path, $TLM_CACHE_DIR,
 * $XDG_CACHE_HOME/tlm or $HOME/.cache/tlm, into buf. Returns buf or NULL. */
char *tlm_disk_default_dir(const char *configured, char *buf, size_t cap);

#endif
