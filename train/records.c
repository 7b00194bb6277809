/* records.c - measured-schedule records: reading them back, the best
 * schedule of each task, the machine each was measured on, the training
 * and held-out split. */
#include "records.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zlib.h>

/* ---- reading records back ------------------------------------------------ */

int tlm_records_read(const char *path, tlm_record_fn fn, void *ctx) {
  gzFile f = gzopen(path, "rb");
  if (!f) return -1;
  char *line = malloc(1 << 16);
  int n = 0;
  while (line && gzgets(f, line, 1 << 16)) {
    cJSON *r = cJSON_Parse(line);
    if (!r) continue; /* a torn last member reads as garbage: skip it */
    const cJSON *v = cJSON_GetObjectItem(r, "v");
    if (cJSON_IsNumber(v) && v->valueint == TLM_RECORD_VERSION) {
      n++;
      if (fn && fn(ctx, r)) {
        cJSON_Delete(r);
        break;
      }
    }
    cJSON_Delete(r);
  }
  free(line);
  gzclose(f);
  return n;
}

const char *const tlm_heldout_families[] = {"gpt2-355m:", "benchdnn:transformer",
                                            "benchdnn:gptj-2016", "benchdnn-conv:efficientdet",
                                            "pool:mobilenet", NULL};

int tlm_family_heldout(const char *family) {
  for (int i = 0; tlm_heldout_families[i]; i++)
    if (!strncmp(family, tlm_heldout_families[i], strlen(tlm_heldout_families[i]))) return 1;
  return 0;
}

/* ---- best schedule per task from the records ---------------------------------- */

typedef struct best_set {
  tlm_best *v;
  int n, cap;
  int split; /* 0 train, 1 held out, -1 both */
} best_set;

/* verification rounds after this one are left out (tlm train --max-round):
 * the data as it was before them */
static int g_max_verify_round = 1 << 30;

void tlm_best_set_max_round(int round) { g_max_verify_round = round; }

static int best_record(void *ctx, const cJSON *r) {
  best_set *b = ctx;
  const cJSON *task = cJSON_GetObjectItem(r, "task"), *fam = cJSON_GetObjectItem(r, "family");
  const cJSON *status = cJSON_GetObjectItem(r, "status"), *ns = cJSON_GetObjectItem(r, "ns");
  const cJSON *sched = cJSON_GetObjectItem(r, "sched");
  if (!cJSON_IsString(task) || !cJSON_IsString(fam) || !cJSON_IsString(status) ||
      !cJSON_IsNumber(ns) || !cJSON_IsArray(sched))
    return 0;
  int held = tlm_family_heldout(fam->valuestring);
  if (b->split >= 0 && held != b->split) return 0;
  const cJSON *hw = cJSON_GetObjectItem(r, "hw");
  const char *hw_text = cJSON_IsString(hw) ? hw->valuestring : NULL;
  int isa = tlm_record_isa(hw_text);
  uint64_t hw_id = hw_text ? XXH3_64bits(hw_text, strlen(hw_text)) | 1 : 0; /* 0: no hw */
  const cJSON *kind = cJSON_GetObjectItem(r, "kind"), *round_no = cJSON_GetObjectItem(r, "round");
  int verified = cJSON_IsString(kind) && !strcmp(kind->valuestring, "verify") && cJSON_IsNumber(round_no);
  if (verified && round_no->valuedouble > g_max_verify_round) return 0;
  if (!verified && (strcmp(status->valuestring, "ok") || ns->valuedouble <= 0)) return 0;
  int i;
  for (i = 0; i < b->n; i++)
    if (b->v[i].hw_id == hw_id && !strcmp(b->v[i].task, task->valuestring)) break;
  if (i == b->n) {
    if (b->n == b->cap) {
      int ncap = b->cap ? b->cap * 2 : 256;
      tlm_best *nv = realloc(b->v, (size_t)ncap * sizeof *nv);
      if (!nv) return 1;
      b->v = nv;
      b->cap = ncap;
    }
    memset(&b->v[i], 0, sizeof b->v[i]);
    snprintf(b->v[i].task, sizeof b->v[i].task, "%s", task->valuestring);
    snprintf(b->v[i].family, sizeof b->v[i].family, "%s", fam->valuestring);
    b->v[i].isa = isa;
    b->v[i].hw_id = hw_id;
    b->v[i].has_target = hw_text && tlm_target_from_hw(hw_text, &b->v[i].target) == 0;
    b->v[i].ns = INFINITY;
    b->v[i].default_ns = INFINITY;
    b->n++;
  }
  tlm_best *e = &b->v[i];
  tlm_schedule rs = {0};
  for (const cJSON *x = sched->child; x && rs.n < TLM_MAX_POINTS; x = x->next)
    rs.v[rs.n++] = (int32_t)x->valueint;
  if (verified) { /* kept apart, with their round */
    int rd = (int)round_no->valuedouble;
    if (rd > e->ver_round) e->ver_round = rd;
    if (e->nver == e->capver) {
      int cap = e->capver ? e->capver * 2 : 8;
      tlm_schedule *a = realloc(e->ver, sizeof *a * (size_t)cap);
      if (a) e->ver = a;
      double *t = realloc(e->ver_ns, sizeof *t * (size_t)cap);
      if (t) e->ver_ns = t;
      int *rr = realloc(e->ver_rd, sizeof *rr * (size_t)cap);
      if (rr) e->ver_rd = rr;
      if (!a || !t || !rr) return 1;
      e->capver = cap;
    }
    e->ver_rd[e->nver] = rd;
    e->ver[e->nver] = rs;
    e->ver_ns[e->nver++] = !strcmp(status->valuestring, "ok") && ns->valuedouble > 0 ? ns->valuedouble : INFINITY;
    if (strcmp(status->valuestring, "ok") || ns->valuedouble <= 0) return 0;
  }
  e->records++;
  if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "default")) e->default_ns = ns->valuedouble;
  if (ns->valuedouble < e->ns) {
    e->ns = ns->valuedouble;
    e->sched = rs;
  }
  if (e->nall == e->capall) {
    int cap = e->capall ? e->capall * 2 : 32;
    tlm_schedule *a = realloc(e->all, sizeof *a * (size_t)cap);
    if (a) e->all = a;
    double *t = realloc(e->all_ns, sizeof *t * (size_t)cap);
    if (t) e->all_ns = t;
    double *sp = realloc(e->all_spread, sizeof *sp * (size_t)cap);
    if (sp) e->all_spread = sp;
    if (!a || !t || !sp) return 1;
    e->capall = cap;
  }
  const cJSON *lo = cJSON_GetObjectItem(r, "ns_min"), *hi = cJSON_GetObjectItem(r, "ns_max");
  e->all[e->nall] = rs;
  e->all_spread[e->nall] = cJSON_IsNumber(lo) && cJSON_IsNumber(hi) && hi->valuedouble >= lo->valuedouble
                               ? (hi->valuedouble - lo->valuedouble) / ns->valuedouble
                               : 0;
  e->all_ns[e->nall++] = ns->valuedouble;
  return 0;
}

void tlm_best_free(tlm_best *b, int n) {
  for (int i = 0; i < n && b; i++) {
    free(b[i].all);
    free(b[i].all_ns);
    free(b[i].all_spread);
    free(b[i].ver);
    free(b[i].ver_ns);
    free(b[i].ver_rd);
  }
  free(b);
}

double tlm_best_time_of(const tlm_best *b, const tlm_schedule *sched, double *spread) {
  double t = INFINITY;
  for (int i = 0; i < b->nall; i++)
    if (b->all[i].n == sched->n && !memcmp(b->all[i].v, sched->v, sizeof sched->v[0] * (size_t)sched->n) &&
        b->all_ns[i] < t) {
      t = b->all_ns[i];
      if (spread) *spread = b->all_spread[i];
    }
  return t;
}

double tlm_best_verified_time_of(const tlm_best *b, const tlm_schedule *sched) {
  for (int i = 0; i < b->nver; i++)
    if (b->ver_rd[i] == b->ver_round && b->ver[i].n == sched->n &&
        !memcmp(b->ver[i].v, sched->v, sizeof sched->v[0] * (size_t)sched->n))
      return b->ver_ns[i];
  return INFINITY;
}

int tlm_record_isa(const char *hw) {
  const char *p = hw ? strstr(hw, "; ") : NULL;
  if (!p) return -1;
  p += 2;
  char name[16];
  size_t n = strcspn(p, " +;");
  if (n == 0 || n >= sizeof name) return -1;
  memcpy(name, p, n);
  name[n] = 0;
  int isa = tlm_isa_parse(name);
  return isa >= 0 ? isa : -1;
}

/* "<word> <number>" at or after p: the number, or -1 */
static long long number_after(const char *text, const char *word) {
  const char *p = strstr(text, word);
  if (!p) return -1;
  p += strlen(word);
  char *end;
  long long v = strtoll(p, &end, 10);
  return end == p ? -1 : v;
}

int tlm_target_from_hw(const char *hw, tlm_target *out) {
  memset(out, 0, sizeof *out);
  int isa = tlm_record_isa(hw);
  if (isa < 0) return -1;
  const char *semi = strstr(hw, "; ");
  char cpu[32] = "";
  size_t cn = (size_t)(semi - hw);
  if (cn < sizeof cpu) memcpy(cpu, hw, cn), cpu[cn] = 0;
  out->isa = out->host_isa = isa;
  out->avx512_vnni = strstr(semi, "+vnni ") != NULL;
  long long l1 = number_after(semi, "L1 "), l2 = number_after(semi, " L2 "),
            l3 = number_after(semi, " L3 ");
  if (l1 <= 0 || l2 <= 0 || l3 < 0) return -1;
  out->l1d_bytes = l1 * 1024, out->l2_bytes = l2 * 1024, out->l3_bytes = l3 * 1024;
  long long share = number_after(semi, "K shared by "); /* since session 13; 1 before */
  out->l3_sharing = share > 0 ? (int32_t)share : 1;
  /* "..., 2 cores, L1": the number before " cores" */
  const char *c = strstr(semi, " cores");
  if (c) {
    const char *b = c;
    while (b > semi && b[-1] >= '0' && b[-1] <= '9') b--;
    out->cores = (int32_t)atoi(b);
  }
  const char *fma = strstr(semi, "FMA ");
  int pipes = 0, bits = 0, lat = 0;
  if (fma && sscanf(fma, "FMA %dx%d lat %d", &pipes, &bits, &lat) == 3 && pipes > 0 && bits > 0 &&
      lat > 0)
    out->fma_pipes = pipes, out->fma_bits = bits, out->fma_latency = lat;
  const char *host = strstr(semi, "; host ");
  if (host) {
    char name[16];
    size_t n = strcspn(host + 7, " ;");
    if (n < sizeof name) {
      memcpy(name, host + 7, n);
      name[n] = 0;
      int h = tlm_isa_parse(name);
      if (h >= 0) out->host_isa = h;
    }
    const char *brand = strstr(host + 7, "; ");
    if (brand) {
      brand += 2;
      size_t bn = strcspn(brand, "(");
      while (bn > 0 && brand[bn - 1] == ' ') bn--;
      if (bn >= sizeof out->brand) bn = sizeof out->brand - 1;
      memcpy(out->brand, brand, bn);
    }
  }
  long long fam = number_after(semi, "(family "), mod = number_after(semi, " model ");
  if (strstr(out->brand, "AMD") || !strncmp(cpu, "znver", 5) || !strncmp(cpu, "bdver", 5) ||
      !strncmp(cpu, "btver", 5))
    out->vendor = 2;
  else if (strstr(out->brand, "Intel") || cpu[0])
    out->vendor = 1; /* LLVM's other x86-64 CPU names are Intel's */
  /* families 17h-1Ah are AMD's (Zen to Zen 5) whatever a VM's brand string
   * says ("Oxide Virtual Turin-like Processor"); Intel's are 6, 15, 18, 19 */
  if (fam >= 0x17 && fam <= 0x1a) out->vendor = 2;
  if (fam > 0) {
    out->family = (int32_t)fam, out->model = mod > 0 ? (int32_t)mod : 0;
  } else if (out->vendor == 2 && !strncmp(cpu, "znver", 5)) {
    int gen = atoi(cpu + 5); /* znver1-2: 17h (Zen 2 from model 30h), 3-4: 19h, 5: 1Ah */
    out->family = gen <= 2 ? 0x17 : gen <= 4 ? 0x19 : 0x1a;
    out->model = gen == 2 ? 0x31 : gen == 4 ? 0x11 : gen == 5 ? 0x02 : 0x01;
  } else if (out->vendor == 1) {
    out->family = 6;
  }
  out->cpu_id = XXH3_64bits(hw, (size_t)(semi - hw));
  tlm_target_complete(out); /* the prefetch reach from the vendor table, as on the host */
  return 0;
}

int tlm_best_target(const tlm_best *b, const tlm_target *host, tlm_target *out) {
  if (b->has_target) {
    *out = b->target;
    return 0;
  }
  *out = *host;
  if (b->isa < 0 || b->isa == host->isa) return 0;
  return b->isa > host->host_isa ? -1 : tlm_target_restrict(out, b->isa);
}

/* `path`: one records file, or several separated by commas */
int tlm_best_load(const char *path, int split, tlm_best **out) {
  best_set b = {.split = split};
  char one[1024];
  for (const char *p = path; *p;) {
    size_t n = strcspn(p, ",");
    if (n < sizeof one) {
      memcpy(one, p, n);
      one[n] = 0;
    }
    if (n >= sizeof one || tlm_records_read(one, best_record, &b) < 0) {
      tlm_best_free(b.v, b.n);
      return -1;
    }
    p += n;
    if (*p == ',') p++;
  }
  *out = b.v;
  return b.n;
}

