/* loopnest.c - lowering a matmul schedule to the loop-nest IR. */
#include "loopnest.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int new_node(ln_nest *n, int kind) {
  if (n->nnodes >= LN_MAX_NODES) return -1;
  int i = n->nnodes++;
  memset(&n->nodes[i], 0, sizeof n->nodes[i]);
  n->nodes[i].kind = kind;
  return i;
}

static int add_child(ln_nest *n, int parent, int child) {
  if (parent < 0 || child < 0) return -1;
  ln_node *p = &n->nodes[parent];
  if (p->nbody >= LN_MAX_BODY) return -1;
  p->body[p->nbody++] = child;
  return 0;
}

/* Appends serial loops for (axis, block) pairs under `parent`, each nested
 * in the previous; returns the innermost (or parent when none). */
static int chain_loops(ln_nest *n, int parent, const int *axes,
                       const int64_t *blocks, int count) {
  for (int i = 0; i < count; i++) {
    int f = new_node(n, LN_FOR);
    if (f < 0) return -1;
    n->nodes[f].axis = axes[i];
    n->nodes[f].block = blocks[i];
    if (add_child(n, parent, f)) return -1;
    parent = f;
  }
  return parent;
}

/* Loops of one tile level in their order: b first (when batched), then m/n
 * or n/m. `blocks` are the child block sizes per axis. */
static int level_loops(int batched, int order, const int64_t *blk, int *axes,
                       int64_t *blocks) {
  int c = 0;
  if (batched) axes[c] = LN_B, blocks[c++] = blk[LN_B];
  int first = order ? LN_N : LN_M, second = order ? LN_M : LN_N;
  axes[c] = first, blocks[c++] = blk[first];
  axes[c] = second, blocks[c++] = blk[second];
  return c;
}

int ln_lower_matmul(const tlm_task *task, const tlm_schedule *s, ln_nest *n) {
  memset(n, 0, sizeof *n);
  const int32_t *v = s->v;
  int batched = tlm_task_batch_total(task) > 1;
  /* child block sizes below each level, per axis */
  int64_t blk2[3] = {v[MM_B3], v[MM_M3], v[MM_N3]};
  int64_t blk1[3] = {blk2[0] * v[MM_B2], blk2[1] * v[MM_M2], blk2[2] * v[MM_N2]};
  int64_t blk0[3] = {blk1[0] * v[MM_B1], blk1[1] * v[MM_M1], blk1[2] * v[MM_N1]};
  int axes[3];
  int64_t blocks[3];

  int root = new_node(n, LN_PARALLEL);
  n->root = root;
  int c0 = level_loops(batched, v[MM_ORDER0], blk0, axes, blocks);
  int nf = v[MM_PARALLEL] < c0 ? v[MM_PARALLEL] : c0;
  n->nodes[root].nfused = nf;
  for (int i = 0; i < nf; i++) {
    n->nodes[root].fused_axis[i] = axes[i];
    n->nodes[root].fused_block[i] = blocks[i];
  }
  /* M alone shared by the workers: its blocks are cut at run time (M is
   * a run-time argument a kernel serves at every value) */
  if (nf == 1 && axes[0] == LN_M) {
    n->nodes[root].split_m = 1;
    n->nodes[root].split_rows = v[MM_M3];
  }
  int l0 = chain_loops(n, root, axes + nf, blocks + nf, c0 - nf);
  int c1 = level_loops(batched, v[MM_ORDER1], blk1, axes, blocks);
  int l1 = chain_loops(n, l0, axes, blocks, c1);
  int k0 = new_node(n, LN_FOR);
  if (l1 < 0 || k0 < 0) return -1;
  n->nodes[k0].axis = LN_K;
  n->nodes[k0].block = v[MM_K1];
  if (add_child(n, l1, k0)) return -1;
  int inner = k0;
  if (v[MM_PACK_B]) {
    int pk = new_node(n, LN_PACK_B);
    if (pk < 0 || add_child(n, k0, pk)) return -1;
    n->nodes[pk].pack_panels = v[MM_N2];
    n->nodes[pk].pack_kblock = v[MM_K1];
    n->nodes[pk].pack_width = v[MM_N3];
    inner = pk;
  }
  int c2 = level_loops(batched, v[MM_ORDER2], blk2, axes, blocks);
  int l2 = chain_loops(n, inner, axes, blocks, c2);
  int tile = new_node(n, LN_TILE);
  if (l2 < 0 || tile < 0 || add_child(n, l2, tile)) return -1;
  ln_node *t = &n->nodes[tile];
  t->tile_b = v[MM_B3];
  t->tile_m = v[MM_M3];
  t->vec = tlm_vec_lanes(v[MM_VEC]);
  t->kvec = tlm_vec_is_k(v[MM_VEC]);
  t->nvec = tlm_vec_per_row(v[MM_VEC], v[MM_N3]);
  t->unroll = v[MM_UNROLL];
  t->epilogue = 0;
  const tlm_matmul_task *mm = &task->u.mm;
  /* A constant B keeps one tile for every M (op_matmul.c MM_M3: prompt
   * lengths and image sizes share a kernel), so M's last block may be a
   * few rows of a tall tile: it computes tile_m rows for them (clamped
   * rows repeat the last). A tile of half the rows for a tail of at most
   * that many halves the cost of such a tail (ResNet-50's 7x7 layers: 49
   * pixels = 8 x 6 + 1; tlm run 49x2048:2048x512 --const-b on the Zen 5
   * VM cost as much as 54 rows). Tiles of fewer than 4 rows keep one
   * version: their tail is at most 2 rows of work. */
  t->tail_m = mm->b_const && !t->kvec && t->tile_b == 1 && t->tile_m >= 4 ? (t->tile_m + 1) / 2 : 0;
  int has_epi = mm->has_bias || mm->has_residual || mm->act != TLM_ACT_NONE;
  if (has_epi) {
    int at = v[MM_EPILOGUE_AT];
    if (at == 3) {
      n->nodes[tile].epilogue = 1;
    } else {
      int e = new_node(n, LN_EPILOGUE);
      if (e < 0 || add_child(n, at == 1 ? l1 : l0, e)) return -1;
    }
  }
  return 0;
}

static int64_t axis_extent(const tlm_task *task, int axis) {
  switch (axis) {
  case LN_B: return tlm_task_batch_total(task);
  case LN_M: return task->u.mm.M;
  case LN_N: return task->u.mm.N;
  default: return task->u.mm.K;
  }
}

int64_t ln_split_m_block(int64_t M, int64_t block, int64_t rows, int64_t workers) {
  if (workers <= 1 || M <= 0 || block <= 0 || (M + block - 1) / block >= workers) return 0;
  if (rows < 1) rows = 1;
  int64_t tiles = (M + rows - 1) / rows, parts = tiles < workers ? tiles : workers;
  if (parts <= 1) return 0;
  /* equal rows, not whole tiles: each block's last tile is then partial,
   * but the busiest worker's tiles are never more (ceil(ceil(M / parts) /
   * rows) <= ceil(tiles / parts)), and with the half-height tail tile
   * (tail_m) fewer: 196 rows as 98 + 98 run 16 tiles and a half each,
   * not 17 and 16 */
  return (M + parts - 1) / parts;
}

int64_t ln_parallel_m_block(const ln_nest *nest, const tlm_task *task, int64_t workers) {
  const ln_node *r = &nest->nodes[nest->root];
  if (!r->split_m || r->nfused != 1 || r->fused_axis[0] != LN_M) return 0;
  return ln_split_m_block(task->u.mm.M, r->fused_block[0], r->split_rows, workers);
}

int64_t ln_parallel_count(const ln_nest *nest, const tlm_task *task, int64_t workers) {
  const ln_node *r = &nest->nodes[nest->root];
  int64_t mblock = ln_parallel_m_block(nest, task, workers);
  int64_t count = 1;
  for (int i = 0; i < r->nfused; i++) {
    int64_t e = axis_extent(task, r->fused_axis[i]);
    int64_t b = mblock > 0 && r->fused_axis[i] == LN_M ? mblock : r->fused_block[i];
    count *= (e + b - 1) / b;
  }
  return count;
}

static const char *axis_name(int a) {
  static const char *names[] = {"b", "m", "n", "k"};
  return (a >= 0 && a < 4) ? names[a] : "?";
}

static int print_node(const ln_nest *nest, int i, int depth, char *buf, int cap,
                      int len) {
  const ln_node *n = &nest->nodes[i];
  char line[200];
  int pad = depth * 2;
  switch (n->kind) {
  case LN_PARALLEL:
    if (n->nfused == 0) {
      snprintf(line, sizeof line, "serial root");
    } else {
      int l = snprintf(line, sizeof line, "parallel fused");
      for (int f = 0; f < n->nfused; f++)
        l += snprintf(line + l, sizeof line - (size_t)l, " %s/%lld", axis_name(n->fused_axis[f]),
                      (long long)n->fused_block[f]);
      if (n->split_m)
        snprintf(line + l, sizeof line - (size_t)l, " (fewer blocks than workers: cut at run time, one a worker)");
    }
    break;
  case LN_FOR:
    snprintf(line, sizeof line, "for %s in blocks of %lld", axis_name(n->axis),
             (long long)n->block);
    break;
  case LN_PACK_B:
    snprintf(line, sizeof line, "pack B block into %lld panels of k%lld x n%lld",
             (long long)n->pack_panels, (long long)n->pack_kblock,
             (long long)n->pack_width);
    break;
  case LN_TILE:
    snprintf(line, sizeof line,
             "register tile b%d x m%d x n%d (vec %d along %s), k unroll %d%s%s", n->tile_b,
             n->tile_m, n->kvec ? n->nvec : n->vec * n->nvec, n->vec, n->kvec ? "k" : "n",
             n->unroll, n->epilogue ? ", epilogue in registers" : "",
             n->tail_m ? ", a copy of m rows halved for M's tail" : "");
    break;
  case LN_EPILOGUE: snprintf(line, sizeof line, "epilogue pass over block"); break;
  default: snprintf(line, sizeof line, "?"); break;
  }
  if (len < cap)
    len += snprintf(buf + len, (size_t)(cap - len), "%*s%s\n", pad, "", line);
  for (int c = 0; c < n->nbody; c++)
    len = print_node(nest, n->body[c], depth + 1, buf, cap, len);
  return len;
}

char *ln_print(const ln_nest *nest, char *buf, int cap) {
  buf[0] = 0;
  print_node(nest, nest->root, 0, buf, cap, 0);
  return buf;
}

/* ---- B packed ahead -------------------------------------------------------------------- */

int ln_pack_layout_of(const ln_nest *nest, const tlm_task *task, ln_pack_layout *out) {
  memset(out, 0, sizeof *out);
  const ln_node *pk = NULL;
  for (int i = 0; i < nest->nnodes; i++)
    if (nest->nodes[i].kind == LN_PACK_B) pk = &nest->nodes[i];
  if (!pk || task->kind != TLM_OP_MATMUL) return 0;
  const tlm_matmul_task *mm = &task->u.mm;
  out->kblock = pk->pack_kblock;
  out->width = pk->pack_width;
  out->npanels = (mm->N + out->width - 1) / out->width;
  out->kblocks = (mm->K + out->kblock - 1) / out->kblock;
  out->batches = tlm_task_batch_total(task);
  out->panel_floats = out->kblock * out->width;
  int64_t f = out->panel_floats;
  const int64_t factors[3] = {out->npanels, out->kblocks, out->batches};
  for (int i = 0; i < 3; i++) {
    if (factors[i] > 0 && f > INT64_MAX / factors[i]) return -1;
    f *= factors[i];
  }
  out->floats = f;
  return 1;
}

void ln_prepack_b(const ln_pack_layout *lay, const tlm_task *task, const float *b,
                  const int64_t *sb, float *dst, int64_t begin, int64_t end) {
  const tlm_matmul_task *mm = &task->u.mm;
  const int64_t W = lay->width, KB = lay->kblock;
  /* in memory order, so the copy's pages are first touched in sequence;
   * rows past K and lanes past N are zeros */
  for (int64_t u = begin; u < end; u++) {
    int64_t pn = u % lay->npanels, slab = u / lay->npanels;
    int64_t bi = slab % lay->batches, jk = slab / lay->batches;
    /* batch offset of flat batch bi, innermost dim last (as the kernels) */
    int64_t boff = 0, q = bi;
    for (int d = mm->nbatch - 1; d >= 0 && lay->batches > 1; d--) {
      int64_t idx = d ? q % mm->batch[d] : q;
      if (d) q /= mm->batch[d];
      boff += idx * sb[d];
    }
    float *o = dst + u * lay->panel_floats;
    int64_t n0 = pn * W, valid = mm->N - n0 < W ? mm->N - n0 : W;
    for (int64_t kk = 0; kk < KB; kk++, o += W) {
      int64_t k = jk * KB + kk, v = k < mm->K ? valid : 0;
      if (v) {
        const float *src = b + boff + k * sb[4] + n0 * sb[5];
        if (sb[5] == 1) memcpy(o, src, (size_t)v * sizeof(float));
        else
          for (int64_t l = 0; l < v; l++) o[l] = src[l * sb[5]];
      }
      if (v < W) memset(o + v, 0, (size_t)(W - v) * sizeof(float));
    }
  }
}

void ln_set_fma_chains(ln_nest *nest, int chains) {
  for (int i = 0; i < nest->nnodes; i++)
    if (nest->nodes[i].kind == LN_TILE) nest->nodes[i].chains = chains > 0 ? chains : 0;
}
