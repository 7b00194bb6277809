/* train.c - `tlm train` and `tlm quantize`.
 *
 * Training data: per task of the records' training split, the sentence of
 * its best measured schedule (fine-tuning), optionally preceded by
 * --pretrain steps on random valid schedules of the collection's tasks
 * (unmeasured: they teach the grammar). Held-out families never enter.
 * Targets come from the latest verification round (schedules re-timed side
 * by side) where a task has one, else from the separate records. */
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "lm/model.h"
#include "train/checkpoint.h"
#include "engine/engine.h"
#include "runtime/clock.h"
#include "train/collect.h"
#include "train/measure.h"
#include "train/tasks.h"

#define SEQ (TLM_LM_PROMPT_LEN + MM_NPOINTS)

static double now_s(void) { return tlm_clock_ms() * 1e-3; }

/* ---- sentences ------------------------------------------------------------------ */

typedef struct dataset {
  int n;
  int32_t (*tokens)[SEQ];
  int32_t (*targets)[SEQ];
  uint64_t (*allowed)[SEQ][TLM_LM_MAX_VOCAB / 64];
} dataset;

static int dataset_add(dataset *d, const tlm_vocab *v, const tlm_space *s,
                       const tlm_schedule *sched) {
  int32_t toks[TLM_LM_MAX_SEQ];
  uint64_t allowed[TLM_LM_MAX_SEQ][TLM_LM_MAX_VOCAB / 64];
  /* sentences of operators with fewer decision points than matmul end
   * early: the rest is padding that carries no loss (attention is causal,
   * so it never reaches the real positions) */
  int len = tlm_lm_sentence(v, s, sched, toks, allowed);
  if (len < TLM_LM_PROMPT_LEN + 1 || len > SEQ) return -1;
  for (int t = len; t < SEQ; t++) toks[t] = TLM_TOK_PAD;
  int i = d->n++;
  d->tokens = realloc(d->tokens, sizeof *d->tokens * (size_t)d->n);
  d->targets = realloc(d->targets, sizeof *d->targets * (size_t)d->n);
  d->allowed = realloc(d->allowed, sizeof *d->allowed * (size_t)d->n);
  if (!d->tokens || !d->targets || !d->allowed) return -1;
  memcpy(d->tokens[i], toks, sizeof d->tokens[i]);
  memset(d->allowed[i], 0, sizeof d->allowed[i]);
  for (int t = 0; t < SEQ; t++) {
    /* position t predicts token t + 1; only decisions carry loss */
    int is_decision = t + 1 >= TLM_LM_PROMPT_LEN && t + 1 < len;
    d->targets[i][t] = is_decision ? toks[t + 1] : -1;
    if (is_decision) memcpy(d->allowed[i][t], allowed[t + 1], sizeof d->allowed[i][t]);
  }
  return 0;
}

static void dataset_free(dataset *d) {
  free(d->tokens);
  free(d->targets);
  free(d->allowed);
  memset(d, 0, sizeof *d);
}

/* decisions in which a differs from b */
static int same_sched(const tlm_schedule *a, const tlm_schedule *b) {
  return a->n == b->n && !memcmp(a->v, b->v, sizeof a->v[0] * (size_t)a->n);
}

/* --good F: the task's distinct measured schedules at least 1 + F times as
 * fast as the rule (its fastest record against theirs), at most k of the
 * fastest; their indices in b->all into idx. Returns how many. */
static int good_schedules(const tlm_best *b, const tlm_space *s, const tlm_schedule *rule, double rule_ns,
                          double f, int k, int *idx) {
  int n = 0;
  if (!isfinite(rule_ns)) return 0;
  while (n < k) {
    int pick = -1;
    for (int i = 0; i < b->nall; i++) {
      if (!isfinite(b->all_ns[i]) || rule_ns < b->all_ns[i] * (1 + f) || same_sched(&b->all[i], rule)) continue;
      if (pick >= 0 && b->all_ns[i] >= b->all_ns[pick]) continue;
      int dup = 0;
      for (int j = 0; j < n && !dup; j++) dup = same_sched(&b->all[idx[j]], &b->all[i]);
      if (!dup && tlm_space_accepts(s, &b->all[i])) pick = i;
    }
    if (pick < 0) break;
    idx[n++] = pick;
  }
  return n;
}

static int edits(const tlm_schedule *a, const tlm_schedule *b) {
  int d = a->n > b->n ? a->n - b->n : b->n - a->n;
  for (int i = 0; i < a->n && i < b->n; i++) d += a->v[i] != b->v[i];
  return d;
}

/* an extent scaled by 2^u, u uniform in [-1.5, 1.5], at least 1 */
static int64_t scale_extent(int64_t e, uint64_t *rng) {
  double u = (double)(tlm_rng_next(rng) >> 11) / 9007199254740992.0 * 3.0 - 1.5;
  double x = floor((double)e * pow(2.0, u) + 0.5);
  return x < 1 ? 1 : (int64_t)x;
}

/* --pretrain-variants: a task of the same operator and epilogue with its
 * extents scaled (matmul M, N, K; convolution image and channels). Returns
 * 0, or -1 when the variant is not a valid problem or the task a pooling
 * or elementwise one (few decisions: their own sentences cover them). */
static int spec_variant(const tlm_task_spec *in, uint64_t *rng, tlm_task_spec *out) {
  *out = *in;
  if (in->op == TLM_OP_CONV) {
    tlm_conv_prb *c = &out->cp;
    int64_t ih = scale_extent(c->ih, rng);
    c->iw = c->iw == c->ih ? ih : scale_extent(c->iw, rng);
    c->ih = ih;
    if (c->g > 1 && c->ic == c->g && c->oc == c->g) c->g = c->ic = c->oc = scale_extent(c->g, rng);
    else if (c->g == 1) c->ic = scale_extent(c->ic, rng), c->oc = scale_extent(c->oc, rng);
    int64_t eh = (c->kh - 1) * (c->dh + 1) + 1, ew = (c->kw - 1) * (c->dw + 1) + 1;
    if (c->ih + 2 * c->ph < eh || c->iw + 2 * c->pw < ew) return -1;
    c->oh = (c->ih + 2 * c->ph - eh) / c->sh + 1;
    c->ow = (c->iw + 2 * c->pw - ew) / c->sw + 1;
  } else if (in->op == TLM_OP_POOL || in->op == TLM_OP_ELTWISE) {
    return -1;
  } else {
    tlm_mm_desc *d = &out->d;
    int64_t M = scale_extent(d->a[d->nda - 2], rng), K = scale_extent(d->a[d->nda - 1], rng);
    d->a[d->nda - 2] = M;
    d->a[d->nda - 1] = d->b[d->ndb - 2] = K;
    d->b[d->ndb - 1] = scale_extent(d->b[d->ndb - 1], rng);
  }
  if (out->cp.ih * out->cp.iw > ((int64_t)1 << 24)) return -1;
  tlm_task t;
  return tlm_task_spec_task(out, &t);
}

/* --pick consensus: a task's equals in noise, the first its fastest */
#define PEND_MAX 24
typedef struct pend {
  int task; /* index into best */
  int neq, pick;
  tlm_schedule eq[PEND_MAX];
  double eqscore[PEND_MAX]; /* mean log time ratio to the rule */
} pend;

static pend *pend_new(pend **a, int *n, int *cap) {
  if (*n == *cap) {
    int nc = *cap ? 2 * *cap : 256;
    pend *na = realloc(*a, sizeof *na * (size_t)nc);
    if (!na) return NULL;
    *a = na, *cap = nc;
  }
  pend *p = &(*a)[(*n)++];
  memset(p, 0, sizeof *p);
  return p;
}

/* Three rounds of voting: each task picks, of its equals, the one whose
 * decisions agree most often with those of the other tasks of its family
 * (all their equals, weighted 1/count, in the first round; their picks
 * after). Ties go to the faster. Hard EM with the family's per-decision
 * value counts as the prior: the targets of similar tasks then agree, so
 * greedy decoding does not fall back to the rule's value where the gains
 * are spread over different decisions. */
static void vote(pend *p, int n, const tlm_best *best) {
  double *agree = malloc(sizeof *agree * PEND_MAX);
  if (!agree) return;
  for (int round = 0; round < 3; round++) {
    for (int a = 0; a < n; a++) {
      for (int j = 0; j < p[a].neq; j++) agree[j] = 0;
      for (int b = 0; b < n; b++) {
        if (b == a || strcmp(best[p[a].task].family, best[p[b].task].family) || p[b].eq[0].n != p[a].eq[0].n)
          continue;
        int lo = round ? p[b].pick : 0, hi = round ? p[b].pick + 1 : p[b].neq;
        double w = 1.0 / (hi - lo);
        for (int j = 0; j < p[a].neq; j++)
          for (int q = lo; q < hi; q++) {
            int same = 0;
            for (int d = 0; d < p[a].eq[j].n; d++) same += p[a].eq[j].v[d] == p[b].eq[q].v[d];
            agree[j] += w * same;
          }
      }
      int pick = 0;
      for (int j = 1; j < p[a].neq; j++)
        if (agree[j] > agree[pick] || (agree[j] == agree[pick] && p[a].eqscore[j] < p[a].eqscore[pick]))
          pick = j;
      p[a].pick = pick; /* from the second round on, later tasks see this one */
    }
  }
  free(agree);
}

/* --skip-family: is `family` one of those left out */
static int family_skipped(const tlm_train_opts *o, const char *family) {
  for (int i = 0; i < o->nskip_family; i++)
    if (strstr(family, o->skip_family[i])) return 1;
  return 0;
}

/* --rule-prior: the rule's sentence on `host` for every training task of
 * the collection's list without a record in `best`, and on
 * o->rule_prior_variants scaled copies of each (spec_variant) that are not
 * measured tasks. Returns the number
 * added, -1 when the task list cannot be built. */
static int add_rule_prior(dataset *fine, const tlm_vocab *vocab, const tlm_target *host,
                          const char *shared, const tlm_best *best, int nbest, uint64_t seed,
                          const tlm_train_opts *o) {
  tlm_task_spec *tasks;
  char err[256];
  int ntasks = tlm_tasks_build(shared, seed, &tasks, err, sizeof err);
  if (ntasks < 0) {
    fprintf(stderr, "tlm train: --rule-prior: %s\n", err);
    return -1;
  }
  int added = 0;
  uint64_t rng = seed ^ 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < ntasks; i++) {
    if (tlm_family_heldout(tasks[i].family) || family_skipped(o, tasks[i].family)) continue;
    int measured = 0;
    for (int j = 0; j < nbest && !measured; j++) measured = !strcmp(best[j].task, tasks[i].text);
    tlm_task task;
    tlm_space s;
    tlm_schedule rule;
    if (!measured && tlm_task_spec_task(&tasks[i], &task) == 0 && tlm_space_init(&s, &task, host) == 0) {
      tlm_space_default(&s, &rule);
      if (dataset_add(fine, vocab, &s, &rule) == 0) added++;
    }
    /* --rule-prior-variants: the rule also on scaled copies of every
     * listed task, measured or not (the shapes between the list's) */
    for (int v = 0; v < o->rule_prior_variants; v++) {
      tlm_task_spec vs;
      if (spec_variant(&tasks[i], &rng, &vs) || tlm_task_spec_task(&vs, &task) ||
          tlm_space_init(&s, &task, host))
        continue;
      tlm_task_spec_text(&vs);
      int known = 0;
      for (int j = 0; j < nbest && !known; j++) known = !strcmp(best[j].task, vs.text);
      if (known) continue;
      tlm_space_default(&s, &rule);
      if (dataset_add(fine, vocab, &s, &rule) == 0) added++;
    }
  }
  free(tasks);
  return added;
}


/* `deadline` (now_s() seconds; 0: none): after 10 steps the run is cut to
 * the steps that fit before it, and the learning-rate schedule's length
 * (*total) with it, so the decay still ends at the last step */
static void run_steps(tlm_gpt2 *m, dataset *d, int steps, int64_t step0, int64_t *total, float lr,
                      uint64_t *rng, const char *phase, double deadline) {
  int B = m->B;
  int32_t(*tok)[SEQ] = malloc(sizeof *tok * (size_t)B);
  int32_t(*tgt)[SEQ] = malloc(sizeof *tgt * (size_t)B);
  uint64_t(*al)[SEQ][TLM_LM_MAX_VOCAB / 64] = malloc(sizeof *al * (size_t)B);
  double t0 = now_s(), ema = 0;
  for (int s = 0; s < steps && tok && tgt && al; s++) {
    for (int b = 0; b < B; b++) {
      int i = (int)(tlm_rng_next(rng) % (uint64_t)d->n);
      memcpy(tok[b], d->tokens[i], sizeof tok[b]);
      memcpy(tgt[b], d->targets[i], sizeof tgt[b]);
      memcpy(al[b], d->allowed[i], sizeof al[b]);
    }
    float loss = tlm_gpt2_forward(m, &tok[0][0], &tgt[0][0], (const uint64_t(*)[8]) & al[0][0][0]);
    tlm_gpt2_backward(m);
    if (s == 9 && deadline > 0) {
      double per = (now_s() - t0) / 10, left = deadline - now_s();
      int fit = 10 + (left > 0 ? (int)(left / per) : 0);
      if (fit < steps) {
        *total -= steps - fit;
        steps = fit;
        fprintf(stderr, "%s: %d steps fit in the time left (%.0f ms a step)\n", phase, steps, per * 1e3);
      }
    }
    float rate = tlm_gpt2_lr(step0 + s, *total / 20 + 1, *total, lr, lr / 10);
    float gn = tlm_gpt2_update(m, rate, 0.9f, 0.95f, 1e-8f, 0.01f, 1.0f);
    ema = s ? 0.95 * ema + 0.05 * loss : loss;
    if (s % 20 == 0 || s == steps - 1) {
      double el = now_s() - t0, tps = (double)(s + 1) * B * SEQ / el;
      fprintf(stderr, "%s step %5d/%d  loss %.4f (avg %.4f)  lr %.2e  grad %.2f  %.0f tok/s  ETA %.0f s\n",
              phase, s + 1, steps, loss, ema, rate, gn, tps, el / (s + 1) * (steps - s - 1));
    }
  }
  free(tok);
  free(tgt);
  free(al);
}

/* --epilogue-variants: a convolution's target taught again on the same
 * layer with a bare epilogue (no bias, scale-shift, residual or activation)
 * and with bias and ReLU, where its space accepts it. A convolution's
 * epilogue runs once per output element after the whole reduction, so it
 * rarely moves the best schedule; but the records hold many layers under one
 * epilogue only (MobileNet's NHWC layers with bias and ReLU), and a model
 * taught so keyed on the epilogue words: candidate 33 put the lanes of
 * MobileNet's first depthwise layer along ow without an epilogue.
 * Returns the sentences added. */
static int conv_epilogue_variants(dataset *fine, const tlm_vocab *vocab, const tlm_task *task,
                                  const tlm_target *tg, const tlm_schedule *target) {
  int added = 0;
  for (int v = 0; v < 2; v++) {
    tlm_task vt = *task;
    tlm_conv_task *c = &vt.u.conv;
    c->has_ss = c->has_residual = 0;
    c->has_bias = v;
    c->act = v ? TLM_ACT_RELU : TLM_ACT_NONE;
    if (!memcmp(&vt, task, sizeof vt)) continue;
    tlm_space vs;
    if (tlm_space_init(&vs, &vt, tg) || !tlm_space_accepts(&vs, target)) continue;
    dataset_add(fine, vocab, &vs, target);
    added++;
  }
  return added;
}

void tlm_train_opts_init(tlm_train_opts *o) {
  *o = (tlm_train_opts){.shared = "../shared", .steps = 2000, .batch = 32, .layers = 4, .heads = 4,
                        .width = 128, .threads = 2, .lr = 1e-3f,
                        .rule_margin = TLM_TRAIN_RULE_MARGIN, .good_k = 16, .seed = 1,
                        .unmeasured_rule = 1, .max_round = 1 << 30};
}

int tlm_train_opts_check(const tlm_train_opts *o) {
  int bad = !o->records || !o->out || o->steps < 0 || o->pretrain < 0 || o->variants < 0 ||
            o->variants > 64 || o->batch < 1 || !(o->rule_margin >= 0) ||
            !(o->near >= 0 && o->near < 1) || !(o->equal_within >= 0 && o->equal_within < 1) ||
            !(o->good >= 0 && o->good < 10) || o->good_k < 1 || o->good_k > 256 ||
            !(o->max_seconds >= 0) || o->unmeasured_rule < 0 || o->unmeasured_rule > 2 ||
            o->nskip_family < 0 || o->nskip_family > TLM_TRAIN_MAX_SKIP ||
            o->rule_prior_variants < 0 || o->rule_prior_variants > 16;
  return bad ? -1 : 0;
}

int tlm_train_run(const tlm_train_opts *o) {
  const char *records = o->records, *out = o->out, *shared = o->shared;
  int variants = o->variants, steps = o->steps, pretrain = o->pretrain, batch = o->batch;
  int layers = o->layers, heads = o->heads, width = o->width, threads = o->threads;
  float lr = o->lr;
  double rule_margin = o->rule_margin, near = o->near, equal_within = o->equal_within;
  int mean_targets = o->mean_targets, consensus = o->consensus, drop_rule = o->drop_rule;
  const char *init = o->init;
  double good = o->good, max_seconds = o->max_seconds;
  int good_k = o->good_k, rule_prior = o->rule_prior, unmeasured_rule = o->unmeasured_rule;
  int epilogue_variants = o->epilogue_variants;
  uint64_t seed = o->seed;
  tlm_best_set_max_round(o->max_round);
  tlm_runtime *rt = tlm_tool_runtime("tlm train", threads, "none", "none");
  if (!rt) return 1;
  /* sentences in the vocabulary (and prompts) of the model fine-tuned,
   * else this build's */
  static tlm_vocab vocab;
  int vocab_version = TLM_LM_VOCAB_VERSION;
  if (init) {
    uint8_t *d = NULL;
    const uint8_t *payload;
    size_t len;
    tlm_lm_file_info info;
    char ierr[512];
    if (tlm_lm_file_read(init, TLM_LM_KIND_INT8, &d, &payload, &len, &info, ierr, sizeof ierr) ==
            TLM_OK ||
        tlm_lm_file_read(init, TLM_LM_KIND_FP32, &d, &payload, &len, &info, ierr, sizeof ierr) ==
            TLM_OK)
      vocab_version = (int)info.vocab_version;
    free(d);
  }
  tlm_vocab_build_version(&vocab, vocab_version);
  tlm_best *best;
  int nbest = tlm_best_load(records, 0, &best);
  if (nbest <= 0) {
    fprintf(stderr, "tlm train: no training records in %s\n", records);
    tlm_destroy(rt);
    return 1;
  }
  dataset fine = {0}, pre = {0};
  pend *pending = NULL;
  int npending = 0, cappending = 0;
  uint64_t rng = seed;
  int taught_rule = 0, beat_rule = 0, no_rule = 0, verified_tasks = 0, near_extra = 0;
  int equal_moved = 0, rule_dropped = 0, good_sentences = 0, good_tasks = 0, fine_tasks = 0;
  int epilogue_sentences = 0;
  uint32_t isa_seen = 0;
  tlm_lm_hw_set hw_seen = {0};
  int foreign_isa = 0, hw_full = 0;
  for (int i = 0; i < nbest; i++) {
    tlm_task_spec spec;
    tlm_task task;
    tlm_space s;
    tlm_target tg; /* the target the task's records were measured for */
    if (family_skipped(o, best[i].family)) continue;
    if (tlm_best_target(&best[i], &rt->target, &tg)) {
      foreign_isa++;
      continue;
    }
    if (tlm_task_spec_parse(best[i].task, &spec) || tlm_task_spec_task(&spec, &task) ||
        tlm_space_init(&s, &task, &tg))
      continue;
    isa_seen |= 1u << tg.isa;
    int32_t hw_words[TLM_LM_HW_WORDS];
    tlm_lm_hw_words(&vocab, &tg, hw_words);
    if (tlm_lm_hw_add(&hw_seen, hw_words) && !hw_full++)
      fprintf(stderr, "tlm train: more than %d distinct hardware prompts: the model will list "
              "the first %d only (and be used only there)\n", TLM_LM_MAX_HW, TLM_LM_MAX_HW);
    tlm_schedule rule;
    tlm_space_default(&s, &rule);
    /* the records in the form the current rule writes one-block matmuls
     * (tlm_mm_canonical: the same loops), so those measured under rule 12
     * and before count as timings of rule 13's schedule */
    tlm_mm_canonical(&s, &best[i].sched);
    for (int j = 0; j < best[i].nall; j++) tlm_mm_canonical(&s, &best[i].all[j]);
    for (int j = 0; j < best[i].nver; j++) tlm_mm_canonical(&s, &best[i].ver[j]);
    double rule_spread = 0;
    double rule_ns = tlm_best_time_of(&best[i], &rule, &rule_spread);
    /* a gain within the rule's own spread between samples is noise */
    double margin = rule_margin > rule_spread ? rule_margin : rule_spread;
    const tlm_schedule *target = &best[i].sched;
    double vrule = tlm_best_verified_time_of(&best[i], &rule);
    if (isfinite(vrule)) { /* timed side by side: the fastest of that round */
      const tlm_best *e = &best[i];
      double *score = malloc(sizeof *score * (size_t)(e->nver > 0 ? e->nver : 1));
      int vb = -1;
      double vb_score = 0; /* log(time / the rule's time): < 0 is faster */
      for (int j = 0; j < e->nver; j++) {
        if (score) score[j] = NAN;
        if (!tlm_space_accepts(&s, &e->ver[j]) || !isfinite(e->ver_ns[j])) continue;
        if (!mean_targets && e->ver_rd[j] != e->ver_round) continue;
        /* over the rounds that timed this schedule (only the latest one
         * unless --targets mean): its mean log ratio to that round's rule */
        double sum = 0;
        int cnt = 0, first = 1;
        for (int q = 0; q < e->nver && first; q++)
          if (q < j && !memcmp(e->ver[q].v, e->ver[j].v, sizeof e->ver[j].v[0] * (size_t)e->ver[j].n) &&
              e->ver[q].n == e->ver[j].n && (mean_targets || e->ver_rd[q] == e->ver_round))
            first = 0; /* scored at its first record */
        if (!first) continue;
        for (int q = 0; q < e->nver; q++) {
          if (e->ver[q].n != e->ver[j].n || memcmp(e->ver[q].v, e->ver[j].v, sizeof e->ver[j].v[0] * (size_t)e->ver[j].n) ||
              !isfinite(e->ver_ns[q]) || (!mean_targets && e->ver_rd[q] != e->ver_round))
            continue;
          double rr = INFINITY;
          for (int u = 0; u < e->nver; u++)
            if (e->ver_rd[u] == e->ver_rd[q] && !memcmp(e->ver[u].v, rule.v, sizeof rule.v[0] * (size_t)rule.n) &&
                e->ver[u].n == rule.n)
              rr = e->ver_ns[u];
          if (isfinite(rr)) sum += log(e->ver_ns[q] / rr), cnt++;
        }
        if (cnt && score) score[j] = sum / cnt;
        if (cnt && (vb < 0 || sum / cnt < vb_score)) vb = j, vb_score = sum / cnt;
      }
      verified_tasks++;
      if (vb < 0 || vb_score >= -log1p(rule_margin)) target = &rule, taught_rule++;
      else target = &e->ver[vb], beat_rule++;
      /* --equal-within: the schedules within equal_within of the winner are
       * its equals in noise; of them, the one closest to the rule says
       * most plainly which decisions make the gain */
      if (target != &rule && equal_within > 0 && score && consensus) {
        pend *pe = pend_new(&pending, &npending, &cappending);
        if (pe) {
          pe->task = i;
          pe->eq[pe->neq] = e->ver[vb], pe->eqscore[pe->neq++] = vb_score;
          for (int j = 0; j < e->nver && pe->neq < PEND_MAX; j++)
            if (j != vb && !isnan(score[j]) && score[j] <= vb_score + log1p(equal_within) &&
                score[j] < -log1p(rule_margin))
              pe->eq[pe->neq] = e->ver[j], pe->eqscore[pe->neq++] = score[j];
          target = NULL; /* added after the vote */
        }
      } else if (target != &rule && equal_within > 0 && score) {
        int bd = edits(&e->ver[vb], &rule);
        int pick = vb;
        for (int j = 0; j < e->nver; j++) {
          if (isnan(score[j]) || score[j] > vb_score + log1p(equal_within) || score[j] >= -log1p(rule_margin))
            continue;
          int d = edits(&e->ver[j], &rule);
          if (d < bd || (d == bd && score[j] < score[pick])) bd = d, pick = j;
        }
        if (pick != vb) equal_moved++;
        target = &e->ver[pick];
      }
      /* --near: the schedules within `near` of the winner are its equals
       * within the timing noise; each is taught as well, so the model
       * learns what they share rather than one round's luckiest */
      if (target != &rule && near > 0 && score)
        for (int j = 0; j < e->nver; j++)
          if (j != vb && !isnan(score[j]) && score[j] <= vb_score + log1p(near) &&
              score[j] < -log1p(rule_margin)) {
            dataset_add(&fine, &vocab, &s, &e->ver[j]);
            near_extra++;
          }
      free(score);
    } else if (!tlm_space_accepts(&s, &best[i].sched)) {
      continue; /* another machine's record, or a point the space no longer offers */
    } else if (!isfinite(rule_ns)) {
      /* nothing in these records timed the current rule: whether their
       * best beats it is unknown */
      no_rule++;
      if (unmeasured_rule == 1) target = NULL;
      else if (unmeasured_rule == 2) target = &rule;
    } else if (rule_ns <= best[i].ns * (1 + margin)) target = &rule, taught_rule++;
    else beat_rule++;
    if (good > 0) { /* the task's schedules that beat the rule by 1 + good, not only its best */
      int gi[256];
      int ng = good_schedules(&best[i], &s, &rule, rule_ns, good, good_k, gi);
      for (int j = 0; j < ng; j++) dataset_add(&fine, &vocab, &s, &best[i].all[gi[j]]);
      good_sentences += ng;
      good_tasks += ng > 0;
      fine_tasks += ng > 0;
      if (ng > 0) target = NULL; /* taught by its good schedules instead */
    }
    if (target == &rule && drop_rule) target = NULL, rule_dropped++;
    if (target) dataset_add(&fine, &vocab, &s, target), fine_tasks++;
    if (target && epilogue_variants && task.kind == TLM_OP_CONV)
      epilogue_sentences += conv_epilogue_variants(&fine, &vocab, &task, &tg, target);
    for (int r = 0; r < 8 && pretrain > 0; r++) {
      tlm_schedule rs;
      tlm_space_sample(&s, &rng, &rs);
      dataset_add(&pre, &vocab, &s, &rs);
    }
    for (int vi = 0; vi < variants && pretrain > 0; vi++) {
      tlm_task_spec vs;
      tlm_task vt;
      tlm_space vsp;
      if (spec_variant(&spec, &rng, &vs) || tlm_task_spec_task(&vs, &vt) ||
          tlm_space_init(&vsp, &vt, &tg))
        continue;
      for (int r = 0; r < 8; r++) {
        tlm_schedule rs;
        tlm_space_sample(&vsp, &rng, &rs);
        dataset_add(&pre, &vocab, &vsp, &rs);
      }
    }
  }
  if (npending) {
    vote(pending, npending, best);
    for (int q = 0; q < npending; q++) {
      tlm_task_spec spec;
      tlm_task task;
      tlm_space s;
      tlm_target tg;
      if (tlm_best_target(&best[pending[q].task], &rt->target, &tg) ||
          tlm_task_spec_parse(best[pending[q].task].task, &spec) || tlm_task_spec_task(&spec, &task) ||
          tlm_space_init(&s, &task, &tg))
        continue;
      dataset_add(&fine, &vocab, &s, &pending[q].eq[pending[q].pick]);
      fine_tasks++;
      equal_moved += pending[q].pick != 0;
    }
  }
  free(pending);
  int prior_n = rule_prior ? add_rule_prior(&fine, &vocab, &rt->target, shared, best, nbest, seed, o) : 0;
  if (prior_n < 0) {
    dataset_free(&fine);
    dataset_free(&pre);
    tlm_best_free(best, nbest);
    tlm_destroy(rt);
    return 1;
  }
  if (rule_prior) {
    int32_t hw_words[TLM_LM_HW_WORDS];
    if (prior_n > 0) tlm_lm_hw_add(&hw_seen, (tlm_lm_hw_words(&vocab, &rt->target, hw_words), hw_words));
    isa_seen |= prior_n > 0 ? 1u << rt->target.isa : 0;
    fprintf(stderr,
            "tlm train: --rule-prior: the rule taught on %d unmeasured training tasks and scaled "
            "copies (%d a task)\n",
            prior_n, o->rule_prior_variants);
  }
  if (foreign_isa)
    fprintf(stderr, "tlm train: %d tasks' records are for an ISA this host cannot run: skipped\n",
            foreign_isa);
  char seen_buf[64] = "";
  for (int i = 0, len = 0; i <= TLM_ISA_AVX512; i++)
    if ((isa_seen >> i) & 1u)
      len += snprintf(seen_buf + len, sizeof seen_buf - (size_t)len, "%s%s", len ? "," : "",
                      tlm_isa_name(i));
  fprintf(stderr, "tlm train: sentences on the targets of %s\n", seen_buf[0] ? seen_buf : "none");
  for (uint32_t i = 0; i < hw_seen.n; i++) {
    char hb[160];
    fprintf(stderr, "tlm train: hardware prompt %s\n", tlm_lm_hw_str(&vocab, hw_seen.tok[i], hb, sizeof hb));
  }
  fprintf(stderr, "tlm train: %d training tasks with a best schedule (%d pretraining sentences)\n",
          fine_tasks, pre.n);
  fprintf(stderr,
          "tlm train: targets: the rule on %d tasks (within %.0f%% or its spread of the best), a schedule "
          "beating it on %d, rule not measured on %d (%s)\n",
          taught_rule, rule_margin * 100, beat_rule, no_rule,
          unmeasured_rule == 1 ? "skipped" : unmeasured_rule == 2 ? "taught the rule" : "taught their best");
  fprintf(stderr, "tlm train: %d tasks' targets from a verification round (timed side by side)\n",
          verified_tasks);
  if (good > 0)
    fprintf(stderr, "tlm train: --good %.2f: %d sentences on %d tasks (schedules at least %.2fx the rule's speed)\n",
            good, good_sentences, good_tasks, 1 + good);
  if (epilogue_variants)
    fprintf(stderr, "tlm train: --epilogue-variants: %d more convolution sentences\n",
            epilogue_sentences);
  if (drop_rule)
    fprintf(stderr, "tlm train: --rule-targets drop: %d tasks taught nothing (the rule was their target)\n",
            rule_dropped);
  if (equal_within > 0)
    fprintf(stderr, "tlm train: %d targets moved to an equal within %.1f%% with %s\n", equal_moved,
            equal_within * 100,
            consensus ? "more agreement with its family" : "fewer edits of the rule");
  if (near > 0)
    fprintf(stderr, "tlm train: %d more sentences: verified schedules within %.0f%% of their task's best\n",
            near_extra, near * 100);
  tlm_gpt2_config mc = {vocab.n, TLM_LM_MAX_SEQ, layers, heads, width};
  tlm_gpt2 m;
  int rc = 1;
  if (fine.n == 0) {
    fprintf(stderr, "tlm train: no training sentence\n");
    goto done;
  }
  if (init) { /* an int8 model file (its weights dequantized), else an fp32 checkpoint */
    char ierr[512];
    tlm_lm_model *q = calloc(1, sizeof *q);
    tlm_status st = q ? tlm_lm_load(q, init, ierr, sizeof ierr) : TLM_ERR_OUT_OF_MEMORY;
    if (st == TLM_OK) {
      st = tlm_gpt2_from_lm(&m, q);
      tlm_lm_free(q);
    } else if (q) {
      char ferr[512];
      st = tlm_gpt2_load(&m, init, ferr, sizeof ferr);
      if (st != TLM_OK) fprintf(stderr, "tlm train: --init: %s; %s\n", ierr, ferr);
    }
    free(q);
    if (st != TLM_OK) goto done;
    if (m.cfg.vocab != vocab.n || tlm_gpt2_train_init(&m, batch, SEQ, rt)) {
      fprintf(stderr, "tlm train: cannot fine-tune %s (vocabulary of %d words, this build's %d)\n",
              init, m.cfg.vocab, vocab.n);
      tlm_gpt2_free(&m);
      goto done;
    }
    fprintf(stderr, "tlm train: fine-tuning %s (trained %lld steps)\n", init, (long long)m.step);
    m.step = 0;
  } else if (tlm_gpt2_init(&m, &mc, seed) || tlm_gpt2_train_init(&m, batch, SEQ, rt)) {
    fprintf(stderr, "tlm train: cannot set up the model\n");
    goto done;
  }
  fprintf(stderr, "tlm train: %d layers, %d heads, width %d: %zu parameters\n", m.cfg.layers,
          m.cfg.heads, m.cfg.width, m.nparams);
  /* every prompt was built on this runtime's target, with this rule */
  /* every ISA whose records taught a sentence (each built on that ISA's
   * target: lanes, registers, FMA chains) */
  m.isa_seen = isa_seen ? isa_seen : 1u << rt->target.isa;
  m.rule_version = TLM_RULE_VERSION;
  m.hw_seen = hw_seen;
  if (m.hw_seen.n == 0) {
    int32_t hw_words[TLM_LM_HW_WORDS];
    tlm_lm_hw_add(&m.hw_seen, (tlm_lm_hw_words(&vocab, &rt->target, hw_words), hw_words));
  }
  int64_t total = pretrain + steps;
  double deadline = max_seconds > 0 ? now_s() + max_seconds : 0;
  if (pretrain) run_steps(&m, &pre, pretrain, 0, &total, lr, &rng, "pretrain", 0);
  run_steps(&m, &fine, steps, pretrain, &total, lr, &rng, "finetune", deadline);
  char err[512];
  if (tlm_gpt2_save(&m, &vocab, seed, out, err, sizeof err)) {
    fprintf(stderr, "tlm train: %s\n", err);
  } else {
    fprintf(stderr, "tlm train: wrote %s\n", out);
    rc = 0;
  }
  tlm_gpt2_free(&m);
done:
  dataset_free(&fine);
  dataset_free(&pre);
  tlm_best_free(best, nbest);
  tlm_destroy(rt);
  return rc;
}

int tlm_quantize_run(const char *ckpt, const char *model, const char *const *only, int nonly,
                     double margin) {
  tlm_gpt2 m;
  char err[512];
  static tlm_vocab vocab;
  if (tlm_gpt2_load(&m, ckpt, err, sizeof err)) {
    fprintf(stderr, "tlm quantize: %s\n", err);
    return 1;
  }
  tlm_vocab_build_version(&vocab, m.vocab_version); /* the checkpoint's */
  if (nonly) { /* keep the named prompts, in the checkpoint's order */
    tlm_lm_hw_set kept = {0};
    int found[TLM_LM_MAX_HW] = {0};
    for (uint32_t i = 0; i < m.hw_seen.n; i++) {
      char hb[160];
      tlm_lm_hw_str(&vocab, m.hw_seen.tok[i], hb, sizeof hb);
      for (int j = 0; j < nonly; j++)
        if (!strcmp(hb, only[j])) {
          tlm_lm_hw_add(&kept, m.hw_seen.tok[i]);
          found[j] = 1;
        }
    }
    for (int j = 0; j < nonly; j++)
      if (!found[j]) {
        fprintf(stderr, "tlm quantize: the checkpoint has no hardware prompt \"%s\"\n", only[j]);
        tlm_gpt2_free(&m);
        return 2;
      }
    m.hw_seen = kept;
  }
  if (!isnan(margin)) m.sentence_margin = margin;
  tlm_status st = tlm_lm_quantize(&m, &vocab, 0, model, err, sizeof err);
  if (st) fprintf(stderr, "tlm quantize: %s\n", err);
  else fprintf(stderr, "tlm quantize: wrote %s (%zu parameters, %u hardware prompts)\n", model, m.nparams,
               m.hw_seen.n);
  tlm_gpt2_free(&m);
  return st ? 1 : 0;
}

/* tlm bound: how often the winner of one verification round beats the rule
 * when timed again in another round. This bounds what a single choice
 * without measurement can reach on these tasks against the rule: the
 * winner is what measured search plus a side-by-side timing picks. */
int tlm_bound_run(const char *records, const char *skip_family) {
  tlm_runtime *rt = tlm_tool_runtime("tlm bound", -1, "none", "none");
  if (!rt) return 1;
  tlm_best *best;
  int nbest = tlm_best_load(records, 0, &best);
  if (nbest <= 0) {
    fprintf(stderr, "tlm bound: no training records in %s\n", records);
    tlm_destroy(rt);
    return 1;
  }
  enum { MAXR = 8 };
  int n[MAXR + 1][MAXR + 1] = {{0}}, win[MAXR + 1][MAXR + 1] = {{0}};
  int win2[MAXR + 1][MAXR + 1] = {{0}}, lose2[MAXR + 1][MAXR + 1] = {{0}}, miss[MAXR + 1][MAXR + 1] = {{0}};
  for (int i = 0; i < nbest; i++) {
    const tlm_best *e = &best[i];
    tlm_task_spec spec;
    tlm_task task;
    tlm_space s;
    tlm_target tg;
    if (e->nver == 0 || (skip_family && strstr(e->family, skip_family))) continue;
    if (tlm_best_target(e, &rt->target, &tg) || tlm_task_spec_parse(e->task, &spec) ||
        tlm_task_spec_task(&spec, &task) || tlm_space_init(&s, &task, &tg))
      continue;
    tlm_schedule rule;
    tlm_space_default(&s, &rule);
    double rule_ns[MAXR + 1];
    int winner[MAXR + 1];
    for (int r = 0; r <= MAXR; r++) rule_ns[r] = INFINITY, winner[r] = -1;
    for (int j = 0; j < e->nver; j++) {
      int r = e->ver_rd[j];
      if (r < 1 || r > MAXR || !isfinite(e->ver_ns[j])) continue;
      if (same_sched(&e->ver[j], &rule)) rule_ns[r] = e->ver_ns[j];
      else if (winner[r] < 0 || e->ver_ns[j] < e->ver_ns[winner[r]]) winner[r] = j;
    }
    for (int a = 1; a <= MAXR; a++)
      for (int b = 1; b <= MAXR; b++) {
        if (a == b || !isfinite(rule_ns[a]) || !isfinite(rule_ns[b])) continue;
        n[a][b]++;
        int w = winner[a];
        if (w < 0 || e->ver_ns[w] >= rule_ns[a]) continue; /* the rule: a tie */
        double t = INFINITY;
        for (int j = 0; j < e->nver; j++)
          if (e->ver_rd[j] == b && isfinite(e->ver_ns[j]) && same_sched(&e->ver[j], &e->ver[w])) t = e->ver_ns[j];
        if (!isfinite(t)) {
          miss[a][b]++;
          continue;
        }
        double x = rule_ns[b] / t;
        win[a][b] += x > 1, win2[a][b] += x > 1.02, lose2[a][b] += x < 1 / 1.02;
      }
  }
  printf("winner picked in round A, timed again in round B (training tasks):\n");
  printf("   A  B  tasks  faster than the rule  by > 2%%  slower by > 2%%  winner not timed in B\n");
  for (int a = 1; a <= MAXR; a++)
    for (int b = 1; b <= MAXR; b++)
      if (n[a][b])
        printf("  %2d %2d  %5d  %6d (%3.0f%%)        %6d  %14d  %21d\n", a, b, n[a][b], win[a][b],
               100.0 * win[a][b] / n[a][b], win2[a][b], lose2[a][b], miss[a][b]);
  tlm_best_free(best, nbest);
  tlm_destroy(rt);
  return 0;
}
