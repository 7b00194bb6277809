/* task.c - helpers over canonical tasks. */
#include "task.h"

#include <string.h>

#include <stdio.h>

int64_t tlm_task_batch_total(const tlm_task *t) {
  int64_t n = 1;
  if (t->kind == TLM_OP_MATMUL)
    for (int i = 0; i < t->u.mm.nbatch; i++) n *= t->u.mm.batch[i];
  return n;
}

double tlm_task_flops(const tlm_task *t) {
  if (tlm_task_is_row(t)) return 5.0 * (double)t->u.row.rows * (double)t->u.row.cols;
  if (t->kind == TLM_OP_POOL) { /* one operation per window position */
    const tlm_pool_task *p = &t->u.pool;
    return (double)p->N * (double)p->C * (double)(p->OD * p->OH * p->OW) *
           (p->KD ? p->KD : p->ID) * (p->KH ? p->KH : p->IH) * (p->KW ? p->KW : p->IW);
  }
  if (t->kind == TLM_OP_ATTENTION) { /* Q K^T and P V over every key (the causal half too) */
    const tlm_attn_task *a = &t->u.attn;
    return 2.0 * (double)a->B * (double)a->Hq * (double)a->Tq * (double)a->Tk *
           (double)(a->D + a->Dv);
  }
  if (t->kind == TLM_OP_CONV) { /* every window position, padding included (benchdnn
                                   counts only the in-bounds ones) */
    const tlm_conv_task *c = &t->u.conv;
    return 2.0 * (double)c->N * c->G * c->OCg * c->ICg * c->KD * c->KH * c->KW *
           (double)c->OD * (double)c->OH * (double)c->OW;
  }
  const tlm_matmul_task *m = &t->u.mm;
  return 2.0 * (double)tlm_task_batch_total(t) * (double)m->M * (double)m->N * (double)m->K;
}

char *tlm_task_str(const tlm_task *t, char *buf, int cap) {
  if (t->kind == TLM_OP_ELTWISE) {
    static const char *acts[] = {"none", "relu", "gelu", "silu", "relu6"};
    static const char *bins[] = {"", "_add", "_mul"};
    snprintf(buf, (size_t)cap, "eltwise_%s%s:%lldx%lld",
             acts[t->u.row.act >= 0 && t->u.row.act < 5 ? t->u.row.act : 0],
             bins[t->u.row.binary >= 0 && t->u.row.binary < 3 ? t->u.row.binary : 0],
             (long long)t->u.row.rows, (long long)t->u.row.cols);
    return buf;
  }
  if (t->kind == TLM_OP_ATTENTION) {
    const tlm_attn_task *a = &t->u.attn;
    snprintf(buf, (size_t)cap, "attention%s:b%lldhq%lldhkv%lldtq%lldtk%lldd%lldv%lld",
             a->causal ? "_causal" : "", (long long)a->B, (long long)a->Hq, (long long)a->Hkv,
             (long long)a->Tq, (long long)a->Tk, (long long)a->D, (long long)a->Dv);
    return buf;
  }
  if (t->kind == TLM_OP_ROPE) {
    snprintf(buf, (size_t)cap, "rope_%s:%lldx%lldx%lld",
             t->u.row.rope_style == TLM_ROPE_INTERLEAVED ? "interleaved" : "neox",
             (long long)(t->u.row.rows / (t->u.row.mrows > 0 ? t->u.row.mrows : 1)),
             (long long)t->u.row.mrows, (long long)t->u.row.cols);
    return buf;
  }
  if (t->kind == TLM_OP_POOL) {
    const tlm_pool_task *p = &t->u.pool;
    snprintf(buf, (size_t)cap, "pool_%s:mb%lldc%lld_id%lldih%lldiw%lld_od%lldoh%lldow%lld_k%dx%dx%d"
             "_s%dx%dx%d_p%dx%dx%d", p->alg == TLM_POOL_MAX ? "max" : "avg", (long long)p->N,
             (long long)p->C, (long long)p->ID, (long long)p->IH, (long long)p->IW,
             (long long)p->OD, (long long)p->OH, (long long)p->OW, p->KD, p->KH, p->KW, p->sd,
             p->sh, p->sw, p->pd, p->ph, p->pw);
    return buf;
  }
  if (tlm_task_is_row(t)) {
    static const char *names[] = {"", "", "softmax", "layernorm", "rmsnorm"};
    snprintf(buf, (size_t)cap, "%s:%lldx%lld%s", names[t->kind], (long long)t->u.row.rows,
             (long long)t->u.row.cols, t->u.row.causal ? "_causal" : "");
    return buf;
  }
  static const char *acts[] = {"", "_relu", "_gelu", "_silu", "_relu6"};
  if (t->kind == TLM_OP_CONV) { /* benchdnn descriptor (dilation as dh = factor - 1) */
    const tlm_conv_task *c = &t->u.conv;
    char sp[200];
    if (c->ndim_sp == 3 || c->ID > 1 || c->KD > 1)
      snprintf(sp, sizeof sp, "id%lldih%lldiw%lld_oc%dod%lldoh%lldow%lld_kd%dkh%dkw%d_sd%dsh%dsw%d"
               "_pd%dph%dpw%d_dd%ddh%ddw%d", (long long)c->ID, (long long)c->IH, (long long)c->IW,
               c->G * c->OCg, (long long)c->OD, (long long)c->OH, (long long)c->OW, c->KD, c->KH,
               c->KW, c->sd, c->sh, c->sw, c->pd, c->ph, c->pw, c->dd - 1, c->dh - 1, c->dw - 1);
    else
      snprintf(sp, sizeof sp, "ih%lldiw%lld_oc%doh%lldow%lld_kh%dkw%d_sh%dsw%d_ph%dpw%d_dh%ddw%d",
               (long long)c->IH, (long long)c->IW, c->G * c->OCg, (long long)c->OH,
               (long long)c->OW, c->KH, c->KW, c->sh, c->sw, c->ph, c->pw, c->dh - 1, c->dw - 1);
    snprintf(buf, (size_t)cap, "g%dmb%lldic%d%s%s%s%s%s%s%s", c->G, (long long)c->N,
             c->G * c->ICg, sp, c->has_bias ? "_bias" : "", c->has_ss ? "_bn" : "",
             c->has_residual ? "_residual" : "", (c->act > 0 && c->act < 5) ? acts[c->act] : "",
             (c->unit & TLM_UNIT_CONV_DST_C) && !(c->unit & TLM_UNIT_CONV_DST_W) ? "_nhwc" : "",
             (c->unit & TLM_UNIT_CONV_WEI_O) && c->G * c->OCg > 1 ? "_hwio" : "");
    return buf;
  }
  const tlm_matmul_task *m = &t->u.mm;
  char bp[80] = "";
  int l = 0;
  for (int i = 0; i < m->nbatch; i++)
    l += snprintf(bp + l, sizeof bp - (size_t)l, "%lldx", (long long)m->batch[i]);
  snprintf(buf, (size_t)cap, "%s%lldx%lld:%s%lldx%lld%s%s%s", bp, (long long)m->M,
           (long long)m->K, bp, (long long)m->K, (long long)m->N,
           m->has_bias ? "_bias" : "", (m->act > 0 && m->act < 5) ? acts[m->act] : "",
           m->has_residual ? "_residual" : "");
  return buf;
}

void tlm_task_clear_runtime(tlm_task *t) {
  if (tlm_task_is_row(t)) { /* rows and the strides */
    tlm_row_task *r = &t->u.row;
    r->rows = r->cols = r->mrows = 0;
    memset(r->sx, 0, sizeof r->sx);
    memset(r->sy, 0, sizeof r->sy);
    r->sg = r->sb = 0;
    memset(r->sz, 0, sizeof r->sz);
    r->sxh = r->syh = 0;
    return;
  }
  switch (t->kind) {
  case TLM_OP_ATTENTION: { /* B, heads, lengths, strides, scale */
    tlm_attn_task *a = &t->u.attn;
    a->B = a->Hq = a->Hkv = a->Tq = a->Tk = 0;
    a->scale = 0;
    memset(a->sq, 0, sizeof a->sq);
    memset(a->sk, 0, sizeof a->sk);
    memset(a->sv, 0, sizeof a->sv);
    memset(a->so, 0, sizeof a->so);
    return;
  }
  case TLM_OP_POOL: { /* N, spatial extents, strides */
    tlm_pool_task *c = &t->u.pool;
    c->N = c->ID = c->IH = c->IW = c->OD = c->OH = c->OW = 0;
    memset(c->ss, 0, sizeof c->ss);
    memset(c->sdst, 0, sizeof c->sdst);
    c->ndim_sp = 0;
    return;
  }
  case TLM_OP_CONV: { /* N, spatial extents, strides */
    tlm_conv_task *c = &t->u.conv;
    c->N = c->ID = c->IH = c->IW = c->OD = c->OH = c->OW = 0;
    memset(c->ss, 0, sizeof c->ss);
    memset(c->sw_, 0, sizeof c->sw_);
    memset(c->sdst, 0, sizeof c->sdst);
    memset(c->sr, 0, sizeof c->sr);
    c->sbias = c->sscale = c->sshift = 0;
    c->ndim_sp = 0;
    return;
  }
  default: { /* matmul: M, N, K and every stride (the unit class stays) */
    tlm_matmul_task *m = &t->u.mm;
    m->M = m->N = m->K = 0;
    memset(m->sa, 0, sizeof m->sa);
    memset(m->sb, 0, sizeof m->sb);
    memset(m->sc, 0, sizeof m->sc);
    memset(m->sr, 0, sizeof m->sr);
    m->sbias = 0;
    m->b_const = 0; /* the code is the same; B packed ahead is an argument */
    return;
  }
  }
}
