/* conv.c - benchdnn convolution descriptors, test problems, the sampled
 * reference check and `tlm run` for convolutions. */
#include "conv_problem.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "engine/engine.h"
#include "runtime/reference.h"
#include "train/measure.h"
#include "train/problem.h"

/* ---- descriptor ------------------------------------------------------------------- */

#define FIELD_MAX ((int64_t)1 << 31)

int tlm_conv_prb_parse(const char *line, tlm_conv_prb *out, char *err, int errcap) {
  static const char *const names[] = {"mb", "ic", "id", "ih", "iw", "oc", "od", "oh",
                                      "ow", "kd", "kh", "kw", "sd", "sh", "sw", "pd",
                                      "ph", "pw", "dd", "dh", "dw", "g"};
  enum { F_MB, F_IC, F_ID, F_IH, F_IW, F_OC, F_OD, F_OH, F_OW, F_KD, F_KH, F_KW,
         F_SD, F_SH, F_SW, F_PD, F_PH, F_PW, F_DD, F_DH, F_DW, F_G, F_N };
  int64_t v[F_N];
  int seen[F_N];
  memset(seen, 0, sizeof seen);
  for (int i = 0; i < F_N; i++) v[i] = 0;
  v[F_G] = 1, v[F_MB] = 2;
  v[F_SD] = v[F_SH] = v[F_SW] = 1;
  v[F_PD] = v[F_PH] = v[F_PW] = -1;
  memset(out, 0, sizeof *out);
  const char *s = line;
  while (*s == ' ' || *s == '\t') s++;
  if (!*s || *s == '#' || *s == '\n' || *s == '\r') return 0;
  if (isdigit((unsigned char)*s) || *s == '-') return 0; /* a matmul, or options */
  const char *start = s;
  while (*s && *s != '\n' && *s != '\r' && *s != ' ' && *s != '\t') {
    if (*s == '_') {
      s++;
      continue;
    }
    if (*s == 'n') { /* the name runs to the end */
      const char *q = s + 1;
      size_t len = strcspn(q, "\r\n");
      while (len && (q[len - 1] == ' ' || q[len - 1] == '\t')) len--;
      if (len >= 2 && q[0] == '"' && q[len - 1] == '"') q++, len -= 2;
      if (len >= sizeof out->name) len = sizeof out->name - 1;
      memcpy(out->name, q, len);
      out->name[len] = 0;
      s += strlen(s);
      break;
    }
    int f = -1;
    for (int i = 0; i < F_N && f < 0; i++)
      if (!strncmp(s, names[i], strlen(names[i]))) f = i;
    if (f < 0) {
      snprintf(err, (size_t)errcap, "column %d: unknown field at '%.12s' (fields: g mb ic id ih iw "
               "oc od oh ow kd kh kw sd sh sw pd ph pw dd dh dw n\"name\")",
               (int)(s - start) + 1, s);
      return -1;
    }
    const char *num = s + strlen(names[f]);
    if (!isdigit((unsigned char)*num)) {
      snprintf(err, (size_t)errcap, "column %d: field '%s' needs a non-negative integer",
               (int)(num - start) + 1, names[f]);
      return -1;
    }
    int64_t x = 0;
    while (isdigit((unsigned char)*num)) {
      x = x * 10 + (*num - '0');
      if (x > FIELD_MAX) {
        snprintf(err, (size_t)errcap, "column %d: field '%s' is too large (max 2^31)",
                 (int)(s - start) + 1, names[f]);
        return -1;
      }
      num++;
    }
    if (seen[f]) {
      snprintf(err, (size_t)errcap, "column %d: field '%s' given twice", (int)(s - start) + 1,
               names[f]);
      return -1;
    }
    seen[f] = 1;
    v[f] = x;
    s = num;
  }
  while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n') s++;
  if (*s && *s != '#') {
    snprintf(err, (size_t)errcap, "column %d: unexpected text '%.12s' after the descriptor",
             (int)(s - start) + 1, s);
    return -1;
  }
#define BAD(...)                                    \
  do {                                              \
    snprintf(err, (size_t)errcap, __VA_ARGS__);     \
    return -1;                                      \
  } while (0)
  if (v[F_G] < 1) BAD("field 'g' must be >= 1");
  if (v[F_MB] < 1) BAD("field 'mb' must be >= 1");
  if (v[F_IC] < 1) BAD("field 'ic' is required and must be >= 1");
  if (v[F_OC] < 1) BAD("field 'oc' is required and must be >= 1");
  if (v[F_IC] % v[F_G] || v[F_OC] % v[F_G])
    BAD("field 'g' (%lld) must divide ic (%lld) and oc (%lld)", (long long)v[F_G],
        (long long)v[F_IC], (long long)v[F_OC]);
  /* per spatial axis: i, o, k, s, p, d */
  static const char *const ax[3] = {"d", "h", "w"};
  int64_t sp[3][6];
  for (int a = 0; a < 3; a++) {
    int base = a; /* F_ID + a, F_OD + a, ... */
    sp[a][0] = v[F_ID + base], sp[a][1] = v[F_OD + base], sp[a][2] = v[F_KD + base];
    sp[a][3] = v[F_SD + base], sp[a][4] = v[F_PD + base], sp[a][5] = v[F_DD + base];
    if (sp[a][3] < 1) BAD("field 's%s' must be >= 1", ax[a]);
    int absent = (sp[a][0] | sp[a][1] | sp[a][2] | sp[a][5]) == 0 && sp[a][3] == 1 && sp[a][4] < 1;
    if (absent) continue;
    if (!sp[a][0] || !sp[a][2])
      BAD("fields 'i%s' and 'k%s' are both needed once any %s field is given", ax[a], ax[a], ax[a]);
    int64_t ext = (sp[a][2] - 1) * (sp[a][5] + 1) + 1; /* dilated kernel extent */
    if (!sp[a][1]) {
      if (sp[a][4] < 0) sp[a][4] = 0;
      int64_t num = sp[a][0] - ext + 2 * sp[a][4];
      if (num < 0) BAD("the kernel along %s (extent %lld) is larger than the padded input",
                       ax[a], (long long)ext);
      sp[a][1] = num / sp[a][3] + 1;
    } else if (sp[a][4] < 0) {
      int64_t p = ((sp[a][1] - 1) * sp[a][3] - sp[a][0] + ext) / 2;
      sp[a][4] = p < 0 ? 0 : p;
    }
  }
  /* benchdnn's sanitize_desc: the output extents say which axes exist */
  int no_d = sp[0][1] == 0, no_h = sp[1][1] == 0, no_w = sp[2][1] == 0;
  int ndims = 5;
  if (no_d) ndims--;
  if (no_d && no_h) ndims--;
  if (no_d && no_h && no_w) ndims--;
  if (ndims <= 2) BAD("no spatial field: give at least ih and kh (or iw and kw)");
  if (ndims == 5) {
    if (no_h && no_w)
      for (int k = 0; k < 6; k++) sp[1][k] = sp[2][k] = sp[0][k];
    else if (no_h || no_w)
      BAD("a 3-D descriptor needs both h and w fields, or neither (then they copy d)");
  } else if (ndims == 4 && no_w) {
    for (int k = 0; k < 6; k++) sp[2][k] = sp[1][k];
  }
  static const int64_t defv[6] = {1, 1, 1, 1, 0, 0};
  for (int k = 0; k < 6; k++) {
    if (ndims < 5) sp[0][k] = defv[k];
    if (ndims < 4) sp[1][k] = defv[k];
  }
  for (int a = 0; a < 3; a++)
    if (sp[a][4] > 65536 || sp[a][5] > 65535 || sp[a][3] > 65536 || sp[a][2] > 4096)
      BAD("stride, padding, dilation or kernel extent along %s out of range", ax[a]);
#undef BAD
  out->g = v[F_G], out->mb = v[F_MB], out->ic = v[F_IC], out->oc = v[F_OC];
  out->id = sp[0][0], out->ih = sp[1][0], out->iw = sp[2][0];
  out->od = sp[0][1], out->oh = sp[1][1], out->ow = sp[2][1];
  out->kd = sp[0][2], out->kh = sp[1][2], out->kw = sp[2][2];
  out->sd = sp[0][3], out->sh = sp[1][3], out->sw = sp[2][3];
  out->pd = sp[0][4], out->ph = sp[1][4], out->pw = sp[2][4];
  out->dd = sp[0][5], out->dh = sp[1][5], out->dw = sp[2][5];
  out->ndims = ndims;
  return 1;
}

char *tlm_conv_prb_str(const tlm_conv_prb *p, char *buf, int cap) {
  if (p->ndims == 5)
    snprintf(buf, (size_t)cap, "g%lldmb%lld_ic%lldid%lldih%lldiw%lld_oc%lldod%lldoh%lldow%lld_"
             "kd%lldkh%lldkw%lld_sd%lldsh%lldsw%lld_pd%lldph%lldpw%lld_dd%llddh%llddw%lld",
             (long long)p->g, (long long)p->mb, (long long)p->ic, (long long)p->id,
             (long long)p->ih, (long long)p->iw, (long long)p->oc, (long long)p->od,
             (long long)p->oh, (long long)p->ow, (long long)p->kd, (long long)p->kh,
             (long long)p->kw, (long long)p->sd, (long long)p->sh, (long long)p->sw,
             (long long)p->pd, (long long)p->ph, (long long)p->pw, (long long)p->dd,
             (long long)p->dh, (long long)p->dw);
  else if (p->ndims == 4)
    snprintf(buf, (size_t)cap, "g%lldmb%lld_ic%lldih%lldiw%lld_oc%lldoh%lldow%lld_kh%lldkw%lld_"
             "sh%lldsw%lld_ph%lldpw%lld_dh%llddw%lld",
             (long long)p->g, (long long)p->mb, (long long)p->ic, (long long)p->ih,
             (long long)p->iw, (long long)p->oc, (long long)p->oh, (long long)p->ow,
             (long long)p->kh, (long long)p->kw, (long long)p->sh, (long long)p->sw,
             (long long)p->ph, (long long)p->pw, (long long)p->dh, (long long)p->dw);
  else
    snprintf(buf, (size_t)cap, "g%lldmb%lld_ic%lldiw%lld_oc%lldow%lld_kw%lld_sw%lld_pw%lld_dw%lld",
             (long long)p->g, (long long)p->mb, (long long)p->ic, (long long)p->iw,
             (long long)p->oc, (long long)p->ow, (long long)p->kw, (long long)p->sw,
             (long long)p->pw, (long long)p->dw);
  return buf;
}

/* ---- problems --------------------------------------------------------------------- */

static float *random_buffer(int64_t n, uint64_t *rng, float lo, float hi) {
  float *b = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  if (!b) return NULL;
  for (int64_t i = 0; i < n; i++)
    b[i] = lo + (hi - lo) * (float)((tlm_rng_next(rng) >> 40) & 0xffffff) / 16777216.0f;
  return b;
}

static int64_t prod(const int64_t *s, int n) {
  int64_t c = 1;
  for (int i = 0; i < n; i++)
    if (__builtin_mul_overflow(c, s[i], &c)) return -1;
  return c;
}

/* shape of an activation tensor (n, c, spatial...) in `layout` order */
static int act_shape(const tlm_conv_prb *p, int64_t n, int64_t c, const int64_t sp[3],
                     tlm_layout layout, int64_t *shape) {
  int S = p->ndims - 2, k = 0;
  shape[k++] = n;
  if (layout == TLM_LAYOUT_NCHW) shape[k++] = c;
  for (int j = 0; j < S; j++) shape[k++] = sp[3 - S + j];
  if (layout == TLM_LAYOUT_NHWC) shape[k++] = c;
  return k;
}

int tlm_conv_problem_shapes(const tlm_conv_prb *p, tlm_layout layout, tlm_weight_layout wlayout,
                            const tlm_conv_epi *epi, tlm_conv_problem *out) {
  memset(out, 0, sizeof *out);
  tlm_conv_epi none = {0, 0, 0, TLM_ACT_NONE};
  if (!epi) epi = &none;
  int S = p->ndims - 2;
  tlm_op op = tlm_op_conv(layout);
  op.u.conv.weight_layout = wlayout;
  op.u.conv.groups = (int)p->g;
  int64_t st[3] = {p->sd, p->sh, p->sw}, pd[3] = {p->pd, p->ph, p->pw}, dl[3] = {p->dd, p->dh, p->dw};
  for (int j = 0; j < 3; j++) {
    op.u.conv.stride[j] = (int)st[j];
    op.u.conv.pad[j] = (int)pd[j];
    op.u.conv.dilation[j] = (int)dl[j] + 1;
  }
  op.u.conv.has_bias = epi->bias;
  op.u.conv.has_scale_shift = epi->bn;
  op.u.conv.has_residual = epi->residual;
  op.u.conv.activation = epi->act;
  out->op = op;
  int64_t isp[3] = {p->id, p->ih, p->iw}, osp[3] = {p->od, p->oh, p->ow}, ksp[3] = {p->kd, p->kh, p->kw};
  int64_t xs[5], ys[5], ws[5];
  int nd = act_shape(p, p->mb, p->ic, isp, layout, xs);
  act_shape(p, p->mb, p->oc, osp, layout, ys);
  int k = 0;
  if (wlayout == TLM_WEIGHTS_OIHW) ws[k++] = p->oc, ws[k++] = p->ic / p->g;
  for (int j = 0; j < S; j++) ws[k++] = ksp[3 - S + j];
  if (wlayout == TLM_WEIGHTS_HWIO) ws[k++] = p->ic / p->g, ws[k++] = p->oc;
  int64_t nx = prod(xs, nd), ny = prod(ys, nd), nw = prod(ws, nd);
  if (nx < 0 || ny < 0 || nw < 0 || nx > ((int64_t)1 << 31) || ny > ((int64_t)1 << 31) ||
      nw > ((int64_t)1 << 31))
    return -1;
  tlm_tensor_dense(&out->in[0], TLM_F32, nd, xs, NULL);
  tlm_tensor_dense(&out->in[1], TLM_F32, nd, ws, NULL);
  tlm_tensor_dense(&out->out, TLM_F32, nd, ys, NULL);
  out->n_in = 2;
  if (epi->bias) tlm_tensor_dense(&out->in[out->n_in++], TLM_F32, 1, &p->oc, NULL);
  if (epi->bn) {
    tlm_tensor_dense(&out->in[out->n_in++], TLM_F32, 1, &p->oc, NULL);
    tlm_tensor_dense(&out->in[out->n_in++], TLM_F32, 1, &p->oc, NULL);
  }
  if (epi->residual) tlm_tensor_dense(&out->in[out->n_in++], TLM_F32, nd, ys, NULL);
  return 0;
}

static int64_t tensor_count(const tlm_tensor *t) { return prod(t->shape, t->ndim); }

int tlm_conv_problem_make(const tlm_conv_prb *p, tlm_layout layout, tlm_weight_layout wlayout,
                          const tlm_conv_epi *epi, uint64_t seed, tlm_conv_problem *out) {
  if (tlm_conv_problem_shapes(p, layout, wlayout, epi, out)) return -1;
  uint64_t rng = seed;
  /* src, weights, dst, then bias, scale, shift, residual as present */
  tlm_tensor *ts[7];
  int nt = 0;
  ts[nt++] = &out->in[0];
  ts[nt++] = &out->in[1];
  ts[nt++] = &out->out;
  for (int i = 2; i < out->n_in; i++) ts[nt++] = &out->in[i];
  int bn_first = epi && epi->bn ? 2 + (epi->bias ? 1 : 0) : -1;
  for (int i = 0; i < nt; i++) {
    int in_idx = i < 2 ? i : i == 2 ? -1 : i - 1;
    float lo = -1.0f, hi = 1.0f;
    if (in_idx == bn_first) lo = 0.5f, hi = 1.5f;          /* scale */
    else if (bn_first >= 0 && in_idx == bn_first + 1) lo = -0.5f, hi = 0.5f; /* shift */
    float *b = out->bufs[i] = random_buffer(tensor_count(ts[i]), &rng, lo, hi);
    if (!b) {
      tlm_conv_problem_free(out);
      return -1;
    }
    ts[i]->data = b;
  }
  return 0;
}

void tlm_conv_problem_free(tlm_conv_problem *p) {
  for (int i = 0; i < 7; i++) free(p->bufs[i]);
  memset(p, 0, sizeof *p);
}

/* error of one output element against a double-precision sum */
static double check_point(const tlm_conv_task *t, const tlm_conv_args *a, int64_t n, int64_t oc,
                          int64_t od, int64_t oh, int64_t ow) {
  double mag;
  double acc = tlm_ref_conv_point(t, a, n, oc, od, oh, ow, &mag);
  double ref = tlm_ref_activation(t->act, (float)acc);
  double y = a->dst[n * a->sd[0] + oc * a->sd[1] + od * a->sd[2] + oh * a->sd[3] + ow * a->sd[4]];
  double e = fabs(y - ref) / (mag + 1e-3);
  return e == e ? e : INFINITY;
}

double tlm_conv_problem_check(const tlm_conv_problem *p, int points, uint64_t seed) {
  tlm_task task;
  tlm_conv_args a;
  char err[256];
  if (tlm_validate_conv(&p->op, p->in, p->n_in, &p->out, 1, &task, &a, err, sizeof err))
    return -1;
  const tlm_conv_task *t = &task.u.conv;
  int64_t OC = (int64_t)t->G * t->OCg;
  int64_t ext[5] = {a.N, OC, a.OD, a.OH, a.OW};
  double worst = 0;
  int64_t total = a.N * OC * a.OD * a.OH * a.OW;
  if (points <= 0 || points >= total) {
    for (int64_t i = 0; i < total; i++) {
      int64_t q = i, idx[5];
      for (int d = 4; d >= 0; d--) idx[d] = q % ext[d], q /= ext[d];
      double e = check_point(t, &a, idx[0], idx[1], idx[2], idx[3], idx[4]);
      if (e > worst) worst = e;
    }
    return worst;
  }
  /* the 32 corners (borders and tails), then random points */
  for (int c = 0; c < 32; c++) {
    int64_t idx[5];
    for (int d = 0; d < 5; d++) idx[d] = (c >> d) & 1 ? ext[d] - 1 : 0;
    double e = check_point(t, &a, idx[0], idx[1], idx[2], idx[3], idx[4]);
    if (e > worst) worst = e;
  }
  uint64_t rng = seed;
  for (int i = 0; i < points; i++) {
    int64_t idx[5];
    for (int d = 0; d < 5; d++) idx[d] = (int64_t)(tlm_rng_next(&rng) % (uint64_t)ext[d]);
    double e = check_point(t, &a, idx[0], idx[1], idx[2], idx[3], idx[4]);
    if (e > worst) worst = e;
  }
  return worst;
}

/* ---- epilogues ---------------------------------------------------------------------- */

int tlm_epilogue_parse(const char *s, tlm_conv_epi *e, int allow_bn) {
  char buf[128];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    if (!strcmp(tok, "bias")) e->bias = 1;
    else if (allow_bn && !strcmp(tok, "bn")) e->bn = 1;
    else if (!strcmp(tok, "residual")) e->residual = 1;
    else if (!strcmp(tok, "relu")) e->act = TLM_ACT_RELU;
    else if (!strcmp(tok, "relu6")) e->act = TLM_ACT_RELU6;
    else if (!strcmp(tok, "gelu")) e->act = TLM_ACT_GELU_TANH;
    else if (!strcmp(tok, "silu")) e->act = TLM_ACT_SILU;
    else {
      fprintf(stderr, "tlm: unknown epilogue item '%s' (bias, %sresidual, relu, relu6, gelu, silu)\n",
              tok, allow_bn ? "bn, " : "");
      return -1;
    }
  }
  return 0;
}

