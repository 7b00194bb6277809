/* fuzz_parse - the text parsers of descriptors and schedules (issue #20).
 *
 * Input: a line, then optionally '\n' and a schedule text. The line goes to
 * every descriptor parser (benchdnn matmul and convolution, row and
 * elementwise operators, the task specs of record files); each must return
 * one of its documented codes, with a message on an error, and what it
 * accepts must be a valid problem. An accepted task spec then has its
 * space built, the rule's schedule picked and checked against the space,
 * its text written and read back, a random schedule drawn and its cache
 * keys made; the schedule text is parsed against that space. Any broken
 * invariant traps (a crash the fuzzer reports). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache/key.h"
#include "runtime/loopnest.h"
#include "runtime/space.h"
#include "runtime/target.h"
#include "train/conv_problem.h"
#include "train/problem.h"
#include "train/tasks.h"

#define REQUIRE(c) \
  do {             \
    if (!(c)) __builtin_trap(); \
  } while (0)

static tlm_target g_target;
static int g_ready;

static void space_checks(const tlm_task *task, const char *sched_text) {
  static tlm_space s; /* large: keep it off the stack */
  if (tlm_space_init(&s, task, &g_target)) return;
  tlm_schedule rule, back, rnd;
  tlm_space_default(&s, &rule);
  REQUIRE(tlm_space_accepts(&s, &rule));
  char text[1024], err[256];
  tlm_schedule_str(&s, &rule, text, sizeof text);
  REQUIRE(tlm_schedule_parse(&s, text, &back, err, sizeof err) == 0);
  REQUIRE(back.n == rule.n && !memcmp(back.v, rule.v, sizeof rule.v[0] * (size_t)rule.n));
  uint64_t rng = (uint64_t)strlen(sched_text) * 0x9e3779b97f4a7c15ull + 1;
  tlm_space_sample(&s, &rng, &rnd);
  REQUIRE(tlm_space_accepts(&s, &rnd));
  tlm_key k;
  tlm_key_shape(&k, task, &g_target, 0);
  tlm_key_schedule(&k, task, &g_target, &rnd);
  if (task->kind == 1 /* TLM_OP_MATMUL */) {
    static ln_nest nest;
    ln_lower_matmul(task, &rule, &nest);
    ln_lower_matmul(task, &rnd, &nest);
  }
  tlm_schedule parsed;
  err[0] = 0;
  int r = tlm_schedule_parse(&s, sched_text, &parsed, err, sizeof err);
  REQUIRE(r == 0 || r == -1);
  REQUIRE(r == 0 || err[0]);
  if (r == 0) REQUIRE(tlm_space_accepts(&s, &parsed));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_ready) {
    tlm_target_detect(&g_target);
    g_ready = 1;
  }
  if (size > 4096) return 0;
  char *buf = malloc(size + 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = 0;
  char *nl = memchr(buf, '\n', size);
  const char *sched_text = "";
  if (nl) {
    *nl = 0;
    sched_text = nl + 1;
  }
  char err[256];

  tlm_mm_desc d;
  err[0] = 0;
  int r = tlm_mm_desc_parse(buf, &d, err, sizeof err);
  REQUIRE(r >= -1 && r <= 1);
  REQUIRE(r != -1 || err[0]);
  if (r == 1) {
    REQUIRE(d.nda >= 2 && d.ndb >= 2 && d.nda <= TLM_MAX_DIMS && d.ndb <= TLM_MAX_DIMS);
    int64_t sa[TLM_MAX_DIMS], sb[TLM_MAX_DIMS], sc[TLM_MAX_DIMS];
    int nc;
    tlm_mm_desc_shapes(&d, sa, sb, sc, &nc);
  }

  tlm_op op;
  int64_t rows, cols;
  err[0] = 0;
  r = tlm_row_desc_parse(buf, &op, &rows, &cols, err, sizeof err);
  REQUIRE(r >= -1 && r <= 1);
  REQUIRE(r != -1 || err[0]);
  if (r == 1) REQUIRE(rows >= 1 && cols >= 1);

  tlm_conv_prb cp;
  err[0] = 0;
  r = tlm_conv_prb_parse(buf, &cp, err, sizeof err);
  REQUIRE(r >= -1 && r <= 1);
  REQUIRE(r != -1 || err[0]);
  if (r == 1)
    REQUIRE(cp.mb >= 1 && cp.ic >= 1 && cp.oc >= 1 && cp.g >= 1 && cp.ic % cp.g == 0 &&
            cp.oc % cp.g == 0 && cp.ih >= 1 && cp.iw >= 1 && cp.id >= 1 && cp.oh >= 1 &&
            cp.ow >= 1 && cp.od >= 1 && cp.kh >= 1 && cp.kw >= 1 && cp.kd >= 1 &&
            cp.ndims >= 3 && cp.ndims <= 5);

  static tlm_task_spec spec;
  if (tlm_task_spec_parse(buf, &spec) == 0) {
    tlm_task task;
    if (tlm_task_spec_task(&spec, &task) == 0) space_checks(&task, sched_text);
  }
  free(buf);
  return 0;
}
