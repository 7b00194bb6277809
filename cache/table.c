/* table.c - keyed entries, single-flight claims, CLOCK eviction (table.h). */
#include "table.h"

#include <stdlib.h>

void tlm_table_init(tlm_table *t, size_t capacity, size_t capacity_bytes) {
  tlm_map_init(&t->map);
  t->list = NULL;
  t->n = t->cap = t->hand = 0;
  t->ready = t->ready_bytes = 0;
  t->capacity = capacity;
  t->capacity_bytes = capacity_bytes;
}

void tlm_table_free(tlm_table *t, void (*free_entry)(tlm_table_entry *e, void *ctx), void *ctx) {
  if (free_entry)
    for (size_t i = 0; i < t->n; i++) free_entry(t->list[i], ctx);
  free(t->list);
  t->list = NULL;
  t->n = t->cap = t->hand = 0;
  tlm_map_free(&t->map);
}

tlm_table_entry *tlm_table_get(const tlm_table *t, const tlm_key *k) {
  return tlm_map_get(&t->map, k);
}

int tlm_table_insert(tlm_table *t, tlm_table_entry *e) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 16;
    tlm_table_entry **list = realloc(t->list, cap * sizeof *list);
    if (!list) return -1;
    t->list = list;
    t->cap = cap;
  }
  if (tlm_map_put(&t->map, &e->key, e)) return -1;
  atomic_store(&e->state, TLM_ENTRY_BUILDING);
  atomic_store(&e->used, 0);
  e->mark = 0;
  e->bytes = 0;
  t->list[t->n++] = e;
  return 0;
}

int tlm_table_claim(tlm_table_entry *e) {
  int s = atomic_load(&e->state);
  if (s != TLM_ENTRY_EVICTED && s != TLM_ENTRY_FAILED) return 0;
  atomic_store(&e->state, TLM_ENTRY_BUILDING);
  return 1;
}

void tlm_table_ready(tlm_table *t, tlm_table_entry *e, size_t bytes) {
  e->bytes = bytes;
  atomic_store(&e->used, 1);
  atomic_store(&e->state, TLM_ENTRY_READY);
  t->ready++;
  t->ready_bytes += bytes;
}

void tlm_table_failed(tlm_table_entry *e) { atomic_store(&e->state, TLM_ENTRY_FAILED); }

int tlm_table_over(const tlm_table *t) {
  return (t->capacity && t->ready > t->capacity) ||
         (t->capacity_bytes && t->ready_bytes > t->capacity_bytes && t->ready > 1);
}

tlm_table_entry *tlm_table_victim(tlm_table *t) {
  for (size_t sweeps = 0; tlm_table_over(t) && sweeps < 2 * t->n + 2; sweeps++) {
    tlm_table_entry *e = t->list[t->hand];
    t->hand = (t->hand + 1) % t->n;
    if (atomic_load(&e->state) != TLM_ENTRY_READY) continue;
    if (atomic_exchange(&e->used, 0)) continue; /* second chance */
    return e;
  }
  return NULL;
}

void tlm_table_evicted(tlm_table *t, tlm_table_entry *e) {
  t->ready--;
  t->ready_bytes -= e->bytes;
  atomic_store(&e->state, TLM_ENTRY_EVICTED);
}

size_t tlm_table_count(const tlm_table *t, int state) {
  size_t c = 0;
  for (size_t i = 0; i < t->n; i++) c += atomic_load(&t->list[i]->state) == state;
  return c;
}

void tlm_table_clear_marks(tlm_table *t) {
  for (size_t i = 0; i < t->n; i++) t->list[i]->mark = 0;
}

size_t tlm_table_sweep(tlm_table *t, const tlm_table_entry *keep,
                       void (*free_entry)(tlm_table_entry *e, void *ctx), void *ctx) {
  size_t kept = 0, hand = 0, removed = 0;
  for (size_t i = 0; i < t->n; i++) {
    tlm_table_entry *e = t->list[i];
    if (atomic_load(&e->state) == TLM_ENTRY_EVICTED && !e->mark && e != keep) {
      tlm_map_remove(&t->map, &e->key);
      if (free_entry) free_entry(e, ctx);
      removed++;
      continue;
    }
    if (i == t->hand) hand = kept;
    t->list[kept++] = e;
  }
  t->n = kept;
  t->hand = kept ? hand % kept : 0;
  return removed;
}
