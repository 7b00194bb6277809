/* space.c - schedule spaces: the generic walkers over their decision
 * points, the register tile every family's rule shares, and the dispatch
 * to the operator families' spaces and rules (family.h, runtime/op_*.c). */
#include "family.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Split factors offered at tile levels 1, 2 and for the K block. */
const int32_t tlm_tile_values[] = {
    1,   2,   3,   4,   5,   6,   7,   8,   10,  12,  14,   16,   20,   24,
    28,  32,  40,  48,  56,  64,  80,  96,  112, 128, 160,  192,  224,  256,
    320, 384, 448, 512, 640, 768, 896, 1024, 1536, 2048, 3072, 4096};
_Static_assert(sizeof tlm_tile_values / sizeof tlm_tile_values[0] == TLM_N_TILE_VALUES,
               "TLM_N_TILE_VALUES (family.h) counts the values");

/* Rows offered for a register tile. */
const int32_t tlm_reg_rows[] = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16};
_Static_assert(sizeof tlm_reg_rows / sizeof tlm_reg_rows[0] == TLM_N_REG_ROWS,
               "TLM_N_REG_ROWS (family.h) counts the rows");

uint64_t tlm_rng_next(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int tlm_space_init(tlm_space *s, const tlm_task *task, const tlm_target *target) {
  memset(s, 0, sizeof *s);
  s->task = *task;
  s->target = *target;
  const tlm_family *f = tlm_family_of(task);
  if (!f) return -1;
  s->npoints = f->npoints;
  s->points = f->points;
  return 0;
}

int64_t tlm_scratch_bytes(const tlm_task *task, const tlm_schedule *s) {
  const tlm_family *f = tlm_family_of(task);
  return f && f->scratch_bytes ? f->scratch_bytes(task, s) : 0;
}

int tlm_space_candidates(const tlm_space *s, int p, const int32_t *d, int32_t *c) {
  const tlm_family *f = tlm_family_of(&s->task);
  return f ? f->candidates(s, p, d, c) : 0;
}

int tlm_rule_family_version(const tlm_task *task, const tlm_target *tg) {
  const tlm_family *f = tlm_family_of(task);
  return f ? f->rule_version(task, tg) : 2;
}

int tlm_rule22_default(const tlm_task *task, const tlm_target *tg, tlm_space *s, tlm_schedule *d) {
  if (!tlm_target_double_pumped(tg)) return 0; /* rule 21's rows there: no walk */
  if (tlm_space_init(s, task, tg)) return 0;
  tlm_space_default(s, d);
  return 1;
}

void tlm_points_walk(const void *space, int npoints, tlm_point_cands cands, tlm_point_choose choose,
                     void *ctx, tlm_schedule *out) {
  int32_t c[TLM_MAX_CANDIDATES];
  memset(out, 0, sizeof *out);
  out->n = npoints;
  for (int p = 0; p < npoints; p++) {
    int n = cands(space, p, out->v, c);
    int i = n > 1 ? choose(ctx, space, p, out->v, c, n) : 0;
    if (i < 0 || i >= n) i = 0;
    out->v[p] = c[i];
  }
}

int tlm_points_accepts(const void *space, int npoints, tlm_point_cands cands,
                       const tlm_schedule *sched) {
  int32_t c[TLM_MAX_CANDIDATES];
  if (sched->n != npoints) return 0;
  for (int p = 0; p < npoints; p++) {
    int n = cands(space, p, sched->v, c), ok = 0;
    for (int i = 0; i < n; i++) ok |= c[i] == sched->v[p];
    if (!ok) return 0;
  }
  return 1;
}

int tlm_choose_uniform(void *ctx, const void *space, int p, const int32_t *d, const int32_t *c,
                       int n) {
  (void)space, (void)p, (void)d, (void)c;
  return (int)(tlm_rng_next((uint64_t *)ctx) % (uint64_t)n);
}

static int cpu_cands(const void *s, int p, const int32_t *d, int32_t *c) {
  return tlm_space_candidates(s, p, d, c);
}

/* a tlm_chooser (typed by tlm_space) behind the generic walker */
typedef struct cpu_chooser {
  tlm_chooser choose;
  void *ctx;
} cpu_chooser;

static int cpu_choose(void *ctx, const void *s, int p, const int32_t *d, const int32_t *c, int n) {
  const cpu_chooser *x = ctx;
  return x->choose(x->ctx, s, p, d, c, n);
}

void tlm_space_walk(const tlm_space *s, tlm_chooser choose, void *ctx,
                    tlm_schedule *out) {
  cpu_chooser x = {choose, ctx};
  tlm_points_walk(s, s->npoints, cpu_cands, cpu_choose, &x, out);
}

int tlm_space_accepts(const tlm_space *s, const tlm_schedule *sched) {
  return tlm_points_accepts(s, s->npoints, cpu_cands, sched);
}

void tlm_space_sample(const tlm_space *s, uint64_t *rng, tlm_schedule *out) {
  tlm_points_walk(s, s->npoints, cpu_cands, tlm_choose_uniform, rng, out);
}

/* The register tile of an outer-product micro-kernel (BLIS's analysis:
 * Low, Igual, Smith and Quintana-Orti, "Analytical modeling is enough for
 * high-performance BLIS", ACM TOMS 2016): `rows` broadcast operands times
 * `nv` vectors of the other operand make rows * nv vector accumulators.
 * Everything here is read from the target:
 *   registers: rows * nv accumulators + nv reused vectors (1 with a single
 *     row: nothing is reused) + 1 broadcast <= vec_regs;
 *   latency: at least fma_chains accumulators (FMA latency x vector FMAs
 *     issued per cycle) when the rows allow it;
 *   among those, the fewest loads per FMA, (rows + nv) / (rows * nv), then
 *   the most accumulators.
 * nv is a power of two, so a full tile's columns (nv * lanes) divide the
 * power-of-two extents of most models and leave no tail, or 3 when the
 * caller gives the extent of the vector axis (ncols > 0), 3 vectors divide
 * it, the register file makes them the fewer loads per FMA, and M's tail
 * does not undo it (each tile's loads per FMA divided by the fraction of
 * its rows and columns that hold data: tlm_reg_tile_used). With 32 registers
 * this gives 6 rows x 4 vectors (3 vectors need 8 rows: 11 loads per 24
 * FMAs against 10); with 16 registers 6 x 2 (BLIS's Haswell sgemm kernel
 * is 6 x 16 floats), or 4 x 3 where 24 columns divide N (7 loads per 12
 * FMAs against 8; oneDNN's AVX2 sgemm kernel has that shape, transposed):
 * the GPT-2 widths 768, 2304 and 3072, and M = 7-8 and 13-16 rows, which 4
 * rows cover with less waste than 6 (5 and 6 rows stay one 5 x 16 or 6 x 16
 * tile). Measured on an Intel Xeon under AVX2: 200 serving requests 1.13x
 * -> 1.20x oneDNN (decode 0.87 -> 1.04x), 3x768:768x768 31 -> 46 GFLOPS,
 * 24-64 rows of 768x768 0.96-1.12x (tlm run --vs, B packed); fewer rows
 * when M is smaller. A negative max_nv fixes nv at -max_nv (any count) and
 * picks the rows only. Rows stop at ptr_rows, the rows the family's inner
 * loop addresses without spilling general-purpose registers (space.h,
 * TLM_GP_REGS): without that bound 1-2 vectors on 32 registers made 14-16
 * rows, whose loops reload row pointers (and then accumulators) from the
 * stack at every step; 8 rows ran 2.2x faster at 64x256:256x32 and 10
 * rows 1.5-2.7x faster on 13x13 convolutions with 20-256 input and 32
 * output channels (tlm run --vs, Intel Xeon, AVX-512). */
typedef struct reg_tile_pick {
  int rows, nv, ok; /* ok: at least fma_chains accumulators */
  double cost;      /* loads per FMA */
} reg_tile_pick;

/* the rows for nv vectors, into *best when better than it */
static void reg_tile_rows(const tlm_target *tg, int64_t max_rows, int v, int ptr_rows,
                          reg_tile_pick *best) {
  int regs = tg->vec_regs > 0 ? tg->vec_regs : 16, chains = tg->fma_chains > 0 ? tg->fma_chains : 1;
  for (int i = 0; i < TLM_N_REG_ROWS; i++) {
    int r = tlm_reg_rows[i];
    if (r > 1 && (r > max_rows || r > ptr_rows)) break;
    if (r * v + (r > 1 ? v : 1) + 1 > regs) break;
    reg_tile_pick p = {r, v, r * v >= chains, (double)(r + v) / (double)(r * v)};
    int better = p.ok != best->ok       ? p.ok > best->ok
                 : p.cost != best->cost ? p.cost < best->cost
                                        : r * v > best->rows * best->nv;
    if (better) *best = p;
  }
}

/* The fraction of the tiles' work that is useful over the whole extent:
 * columns, ncols over the columns of the tiles of nv vectors that cover
 * it, a partial last tile counted twice (its masked or zero-padded panel
 * costs more than a full tile: 64 columns as two 24-column tiles and a
 * 16-column tail ran at 98 GFLOPS against 115 as four 16-column tiles,
 * B packed, Intel Xeon AVX2); rows (when max_rows is the extent M, not a
 * bound), M over the rows of the tiles that cover it, as a tail tile of
 * fewer rows costs about what a full one does: it waits out the same FMA
 * latency and streams the same B panel. Measured on that Xeon (tlm run
 * --vs, N = K = 768): M = 6 in one 6 x 16 tile 57 GFLOPS, as 4 x 24 plus a
 * 2-row tail 33; M = 7 as 6 x 16 plus a 1-row tail 33, as 4 x 24 plus 3
 * rows 40. */
double tlm_reg_tile_used(const tlm_target *tg, int rows, int nv, int64_t max_rows,
                            int64_t ncols) {
  int64_t w = (int64_t)nv * (tg->vec_lanes > 0 ? tg->vec_lanes : 1);
  int64_t tiles = (ncols + w - 1) / w + (ncols % w ? 1 : 0);
  double used = (double)ncols / (double)(tiles * w);
  if (max_rows > 0 && max_rows < ((int64_t)1 << 20))
    used *= (double)max_rows / (double)(((max_rows + rows - 1) / rows) * rows);
  return used;
}

/* Of the row counts up to `rows` whose accumulators cover as many FMA
 * chains as `rows` does (or all of fma_chains), the one of the lowest
 * score(tg, extent, r, nv); a score within a factor `tie` of the best so
 * far takes the later, larger r. */
typedef double (*rows_score_fn)(const tlm_target *tg, int64_t extent, int r, int nv);
static int rows_by_score(const tlm_target *tg, int64_t extent, int nv, int rows,
                         rows_score_fn score_of, double tie) {
  if (extent <= 0 || nv <= 0 || rows <= 1) return rows;
  int chains = tg->fma_chains > 0 ? tg->fma_chains : 1;
  int64_t need = (int64_t)rows * nv < chains ? (int64_t)rows * nv : chains;
  int best = rows;
  double best_score = 1e300;
  for (int i = 0; i < TLM_N_REG_ROWS; i++) {
    int r = tlm_reg_rows[i];
    if (r > rows) break;
    if ((int64_t)r * nv < need) continue;
    double score = score_of(tg, extent, r, nv);
    if (score <= best_score * tie) {
      best_score = score;
      best = r;
    }
  }
  return best;
}

/* loads per FMA over the fraction of the tiles' rows that hold data */
static double rows_loads_score(const tlm_target *tg, int64_t extent, int r, int nv) {
  (void)tg;
  double cost = (double)(r + (r > 1 ? nv : 1)) / ((double)r * nv);
  double used = (double)extent / (double)(ceil_div(extent, r) * r);
  return cost / used;
}

int tlm_reg_rows_for_extent(const tlm_target *tg, int64_t extent, int nv, int rows) {
  return rows_by_score(tg, extent, nv, rows, rows_loads_score, 1.0); /* exact ties */
}

/* The cycles of one k step of an r x nv register tile, counted from the
 * target's FMA datapath: r * nv vector FMAs on fma_pipes pipes, each
 * taking vec_bits / fma_bits issue slots where the vector is wider than
 * the pipe (AVX-512 on Zen 4's 256-bit pipes: one zmm FMA a cycle), plus
 * its loads, nv vectors of B and one 4-byte broadcast of A per row (one
 * for a single row), on TLM_LOAD_PORTS ports each as wide as the FMA
 * datapath (AMD's Software Optimization Guides for families 17h-1Ah and
 * Intel's Optimization Reference Manual: two loads a cycle on every core
 * tlm targets; Zen 4 splits a zmm load in two as it does an FMA). The two
 * are added, not overlapped: at these tiles both units run near their
 * rate, so neither hides the other (the measurements in op_matmul.c,
 * mm_rule_rows_m3, order the rows so; overlapped, 1 x 4 vectors came out
 * ahead at 7 rows). */
#define TLM_LOAD_PORTS 2
static double reg_tile_cycles(const tlm_target *tg, int r, int nv) {
  double f = tlm_target_fma_width(tg);
  int pipes = tg->fma_pipes > 0 ? tg->fma_pipes : 2;
  return (double)r * nv / (pipes * f) + (double)nv / (TLM_LOAD_PORTS * f) +
         (double)r / TLM_LOAD_PORTS;
}

/* the cycles of the tiles that cover the extent */
static double rows_cycles_score(const tlm_target *tg, int64_t extent, int r, int nv) {
  return (double)ceil_div(extent, r) * reg_tile_cycles(tg, r, nv);
}

int tlm_reg_rows_timed(const tlm_target *tg, int64_t extent, int nv, int rows) {
  /* ties within rounding: the cycles are sums of fractions */
  return rows_by_score(tg, extent, nv, rows, rows_cycles_score, 1 + 1e-12);
}

void tlm_reg_tile(const tlm_target *tg, int64_t max_rows, int max_nv, int64_t ncols,
                  int ptr_rows, int *rows_out, int *nv_out) {
  reg_tile_pick best = {1, 1, 0, 1e30};
  if (max_nv < 0)
    reg_tile_rows(tg, max_rows, -max_nv, ptr_rows, &best);
  else {
    for (int v = 1; v <= max_nv && v <= 8; v *= 2) reg_tile_rows(tg, max_rows, v, ptr_rows, &best);
    reg_tile_pick three = {1, 1, 0, 1e30};
    int64_t w3 = 3 * (int64_t)(tg->vec_lanes > 0 ? tg->vec_lanes : 1);
    if (ncols > 0 && ncols % w3 == 0 && max_nv >= 3) reg_tile_rows(tg, max_rows, 3, ptr_rows, &three);
    /* 3 vectors where they cover the axis exactly (B packed, 24- and
     * 16-column tiles ran at the same speed without tails, 120 GFLOPS at
     * 3136x64:64x96 on the Xeon's AVX2, and a 24-column tile's tail cost
     * 6-15%: 64, 256 and 512 output channels of ResNet-50's 1x1 layers),
     * where the register file makes them the better tile (16 registers;
     * not 32), and the rows' tail does not undo it */
    if (three.ok >= best.ok && three.cost < best.cost &&
        three.cost / tlm_reg_tile_used(tg, three.rows, 3, max_rows, ncols) <
            best.cost / tlm_reg_tile_used(tg, best.rows, best.nv, max_rows, ncols))
      best = three;
  }
  *rows_out = best.rows;
  *nv_out = best.nv;
}


/* The rule of the task's family (its rule function). The rules pick
 * powers of two for block counts and K blocks, so that nearby extents (a
 * growing attention length, similar prompt lengths) get the same
 * decisions and share one kernel: extents are run-time arguments, a
 * kernel serves any of them. */
static int choose_default(void *ctx, const tlm_space *s, int p, const int32_t *d,
                          const int32_t *c, int n) {
  (void)ctx;
  const tlm_family *f = tlm_family_of(&s->task);
  return f ? f->rule(s, p, d, c, n) : 0;
}

void tlm_space_default(const tlm_space *s, tlm_schedule *out) {
  tlm_space_walk(s, choose_default, NULL, out);
}

char *tlm_points_str(const tlm_point *points, int npoints, const tlm_schedule *sched, char *buf,
                     int cap) {
  int len = 0;
  buf[0] = 0;
  for (int p = 0; p < npoints && len < cap; p++)
    len += snprintf(buf + len, (size_t)(cap - len), "%s%s=%d", p ? " " : "", points[p].name,
                    sched->v[p]);
  return buf;
}

char *tlm_schedule_str(const tlm_space *s, const tlm_schedule *sched, char *buf,
                       int cap) {
  return tlm_points_str(s->points, s->npoints, sched, buf, cap);
}

int tlm_points_parse(const tlm_point *points, int npoints, const char *text, tlm_schedule *out,
                     char *err, int errcap) {
  int seen[TLM_MAX_POINTS] = {0};
  memset(out, 0, sizeof *out);
  out->n = npoints;
  const char *q = text;
  while (*q) {
    while (*q == ' ' || *q == ',') q++;
    if (!*q) break;
    const char *eq = strchr(q, '=');
    if (!eq) {
      snprintf(err, (size_t)errcap, "expected name=value at '%s'", q);
      return -1;
    }
    int p = -1;
    for (int i = 0; i < npoints; i++)
      if ((size_t)(eq - q) == strlen(points[i].name) &&
          strncmp(q, points[i].name, (size_t)(eq - q)) == 0)
        p = i;
    if (p < 0) {
      snprintf(err, (size_t)errcap, "unknown decision '%.*s'", (int)(eq - q), q);
      return -1;
    }
    char *end;
    long v = strtol(eq + 1, &end, 10);
    if (end == eq + 1 || v < 0 || v > 1 << 20) {
      snprintf(err, (size_t)errcap, "bad value for %s", points[p].name);
      return -1;
    }
    out->v[p] = (int32_t)v;
    seen[p] = 1;
    q = end;
  }
  for (int i = 0; i < npoints; i++)
    if (!seen[i]) {
      snprintf(err, (size_t)errcap, "decision '%s' missing", points[i].name);
      return -1;
    }
  return 0;
}

int tlm_schedule_parse(const tlm_space *s, const char *text, tlm_schedule *out,
                       char *err, int errcap) {
  if (tlm_points_parse(s->points, s->npoints, text, out, err, errcap)) return -1;
  if (!tlm_space_accepts(s, out)) {
    snprintf(err, (size_t)errcap, "schedule is not in this task's space");
    return -1;
  }
  return 0;
}

