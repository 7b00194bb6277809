/* map.c - linear probing, grown at 1/2 load. */
#include "map.h"

#include <stdlib.h>
#include <string.h>

void tlm_map_init(tlm_map *m) { memset(m, 0, sizeof *m); }

void tlm_map_free(tlm_map *m) {
  for (size_t i = 0; i < m->cap; i++) free(m->slots[i].key);
  free(m->slots);
  memset(m, 0, sizeof *m);
}

static size_t find(const tlm_map_slot *slots, size_t cap, const tlm_key *k) {
  size_t i = (size_t)k->hash_lo & (cap - 1);
  while (slots[i].key && !tlm_key_equal(slots[i].key, k)) i = (i + 1) & (cap - 1);
  return i;
}

void *tlm_map_get(const tlm_map *m, const tlm_key *k) {
  if (!m->cap) return NULL;
  size_t i = find(m->slots, m->cap, k);
  return m->slots[i].key ? m->slots[i].value : NULL;
}

static int grow(tlm_map *m) {
  size_t cap = m->cap ? m->cap * 2 : 64;
  tlm_map_slot *s = calloc(cap, sizeof *s);
  if (!s) return -1;
  for (size_t i = 0; i < m->cap; i++)
    if (m->slots[i].key) s[find(s, cap, m->slots[i].key)] = m->slots[i];
  free(m->slots);
  m->slots = s;
  m->cap = cap;
  return 0;
}

int tlm_map_put(tlm_map *m, const tlm_key *k, void *value) {
  if ((m->count + 1) * 2 > m->cap && grow(m)) return -1;
  size_t i = find(m->slots, m->cap, k);
  if (!m->slots[i].key) {
    /* copy only the used prefix of the key */
    size_t n = offsetof(tlm_key, bytes) + k->len;
    tlm_key *c = calloc(1, sizeof *c);
    if (!c) return -1;
    memcpy(c, k, n);
    m->slots[i].key = c;
    m->count++;
  }
  m->slots[i].value = value;
  return 0;
}

void tlm_map_remove(tlm_map *m, const tlm_key *k) {
  if (!m->cap) return;
  size_t i = find(m->slots, m->cap, k);
  if (!m->slots[i].key) return;
  free(m->slots[i].key);
  m->slots[i].key = NULL;
  m->count--;
  /* shift later entries of the probe run back into the hole */
  size_t hole = i, j = i;
  for (;;) {
    j = (j + 1) & (m->cap - 1);
    if (!m->slots[j].key) break;
    size_t home = (size_t)m->slots[j].key->hash_lo & (m->cap - 1);
    /* move j to the hole if its home is not in (hole, j] cyclically */
    int between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!between) {
      m->slots[hole] = m->slots[j];
      m->slots[j].key = NULL;
      m->slots[j].value = NULL;
      hole = j;
    }
  }
}
