/* table.h - a table of entries by key with single-flight claims and CLOCK
 * eviction (internal). Kind-agnostic: an entry is a tlm_table_entry at the
 * start of its owner's struct (the engine's kernels); key bytes in, entry
 * out. The table never allocates or frees an owner's struct: the owner
 * inserts what it allocated and frees what tlm_table_sweep hands back.
 *
 * Not synchronized: the owner holds one lock around every call that
 * changes the table (the engine: map_lock for writing, and its execution
 * lock while code is freed). `state` and `used` are atomics so that the
 * owner may read them, and set `used`, under a read lock. */
#ifndef TLM_CACHE_TABLE_H
#define TLM_CACHE_TABLE_H

#include <stdatomic.h>
#include <stddef.h>

#include "map.h"

/* An entry's life: claimed BUILDING by the one caller that builds it
 * (single flight: others wait for the state to change), then READY, or
 * FAILED; a READY entry may be EVICTED (its resources released, the entry
 * kept as a record), and a FAILED or EVICTED one claimed again. */
enum { TLM_ENTRY_BUILDING = 0, TLM_ENTRY_READY = 1, TLM_ENTRY_FAILED = 2, TLM_ENTRY_EVICTED = 3 };

typedef struct tlm_table_entry {
  tlm_key key;
  _Atomic int state; /* TLM_ENTRY_* */
  atomic_int used;   /* CLOCK reference bit: set on use, cleared by a sweep */
  int mark;          /* the owner's, while it decides what tlm_table_sweep frees */
  size_t bytes;      /* resident size while READY (tlm_table_ready) */
} tlm_table_entry;

typedef struct tlm_table {
  tlm_map map;             /* key -> entry */
  tlm_table_entry **list;  /* every entry, in insertion order (the CLOCK ring) */
  size_t n, cap, hand;
  size_t ready, ready_bytes; /* READY entries and their bytes */
  size_t capacity;         /* READY entries kept, 0 = unlimited */
  size_t capacity_bytes;   /* their bytes, 0 = unlimited */
} tlm_table;

void tlm_table_init(tlm_table *t, size_t capacity, size_t capacity_bytes);
/* Frees the table's own memory; for each entry still in it calls
 * free_entry(e, ctx) first (NULL: none). */
void tlm_table_free(tlm_table *t, void (*free_entry)(tlm_table_entry *e, void *ctx), void *ctx);

/* The entry of key k, NULL when none. */
tlm_table_entry *tlm_table_get(const tlm_table *t, const tlm_key *k);

/* Adds e (owned by the caller, e->key set, not in the table) as BUILDING:
 * the caller is its builder. Returns 0, -1 when out of memory (then e is
 * not in the table). */
int tlm_table_insert(tlm_table *t, tlm_table_entry *e);

/* Claims a FAILED or EVICTED entry for a rebuild (state -> BUILDING):
 * returns 1 when the caller is now its builder, 0 when it is READY or
 * BUILDING (someone else's build: wait, then look again). */
int tlm_table_claim(tlm_table_entry *e);

/* A build finished: BUILDING -> READY with `bytes` resident, marked used. */
void tlm_table_ready(tlm_table *t, tlm_table_entry *e, size_t bytes);

/* A build failed: BUILDING -> FAILED. */
void tlm_table_failed(tlm_table_entry *e);

/* 1 when the READY entries exceed a capacity (the byte capacity only while
 * more than one entry is READY). */
int tlm_table_over(const tlm_table *t);

/* The next entry the CLOCK hand evicts while over capacity: a READY entry
 * whose reference bit was clear (set bits are cleared on the way: a second
 * chance), or NULL when none is left to evict (at most two turns of the
 * ring per call) or the table is within its capacities. The caller
 * releases its resources, then calls tlm_table_evicted. */
tlm_table_entry *tlm_table_victim(tlm_table *t);

/* READY -> EVICTED; its bytes leave the counts. */
void tlm_table_evicted(tlm_table *t, tlm_table_entry *e);

/* Number of entries in state `state`. */
size_t tlm_table_count(const tlm_table *t, int state);

/* Removes every EVICTED entry whose mark is 0, other than `keep`, and
 * hands each to free_entry(e, ctx) (after removal: the caller frees it).
 * The owner sets marks first (clear all with tlm_table_clear_marks, then
 * mark what it still references). Returns how many it removed. */
size_t tlm_table_sweep(tlm_table *t, const tlm_table_entry *keep,
                       void (*free_entry)(tlm_table_entry *e, void *ctx), void *ctx);
void tlm_table_clear_marks(tlm_table *t);

#endif
