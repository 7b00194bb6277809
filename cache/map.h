/* map.h - open-addressing hash map from tlm_key to a pointer (internal).
 * Not synchronized: the owner guards it (table.h's kernel table and the
 * engine's plan map, both under the engine's rwlock). */
#ifndef TLM_CACHE_MAP_H
#define TLM_CACHE_MAP_H

#include "key.h"

typedef struct tlm_map_slot {
  tlm_key *key; /* owned copy; NULL = empty */
  void *value;  /* not owned */
} tlm_map_slot;

typedef struct tlm_map {
  tlm_map_slot *slots;
  size_t cap;   /* power of two */
  size_t count;
} tlm_map;

void tlm_map_init(tlm_map *m);
void tlm_map_free(tlm_map *m); /* frees the key copies, not the values */
void *tlm_map_get(const tlm_map *m, const tlm_key *k);
/* Removes k if present (backward-shift deletion keeps probes valid). */
void tlm_map_remove(tlm_map *m, const tlm_key *k);
/* Inserts or replaces. Returns 0, -1 when out of memory. */
int tlm_map_put(tlm_map *m, const tlm_key *k, void *value);

#endif
