/* measure.c - warm kernel timing shared by collect, eval and run. */
#include "measure.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

double tlm_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int tlm_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void tlm_time_kernel(tlm_runtime *rt, const tlm_kernel *k, const tlm_task *task,
                     const tlm_mm_args *args, double min_time_ms, double give_up_ns,
                     tlm_timing *out) {
  char err[256];
  double first = tlm_now_ns();
  tlm_engine_exec(rt, k, task, args, err, sizeof err);
  first = tlm_now_ns() - first;
  int batch = first >= 20000 ? 1 : (int)(20000 / (first + 1)) + 1;
  int hopeless = first > 10 * give_up_ns && first > 1e6;
  double times[200];
  int reps = 0;
  double t0 = tlm_now_ns();
  while (reps < 200) {
    double a = tlm_now_ns();
    for (int b = 0; b < batch; b++) tlm_engine_exec(rt, k, task, args, err, sizeof err);
    times[reps++] = (tlm_now_ns() - a) / batch;
    double spent_ms = (tlm_now_ns() - t0) * 1e-6;
    if ((reps >= 3 && spent_ms >= min_time_ms) || hopeless || spent_ms > 2000) break;
  }
  qsort(times, (size_t)reps, sizeof(double), tlm_cmp_double);
  out->median_ns = times[reps / 2];
  out->min_ns = times[0];
  out->max_ns = times[reps - 1];
  out->reps = reps;
}
