/* gpu_emu.c - the CUDA thread model on host threads (see gpu_emu.h). */
#define _GNU_SOURCE
#include "gpu_emu.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct emu {
  tlm_gpu_host_fn fn;
  const int64_t *args;
  tlm_gpu_launch l;
  float *smem;
  int64_t smem_floats;
  /* barrier: a generation counter under a mutex */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int32_t waiting;
  uint64_t generation;
  int failed; /* a barrier timed out: every thread leaves */
} emu;

typedef struct worker {
  emu *e;
  int32_t tid;
} worker;

static void emu_barrier(void *ctx) {
  emu *e = ctx;
  pthread_mutex_lock(&e->mu);
  if (e->failed) {
    pthread_mutex_unlock(&e->mu);
    return;
  }
  uint64_t gen = e->generation;
  if (++e->waiting == e->l.threads) {
    e->waiting = 0;
    e->generation++;
    pthread_cond_broadcast(&e->cv);
  } else {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    while (gen == e->generation && !e->failed) {
      if (pthread_cond_timedwait(&e->cv, &e->mu, &until) == ETIMEDOUT) {
        e->failed = 1;
        pthread_cond_broadcast(&e->cv);
      }
    }
  }
  pthread_mutex_unlock(&e->mu);
}

static void *worker_main(void *arg) {
  worker *w = arg;
  emu *e = w->e;
  for (int64_t bz = 0; bz < e->l.grid_z; bz++)
    for (int64_t by = 0; by < e->l.grid_y; by++)
      for (int64_t bx = 0; bx < e->l.grid_x; bx++) {
        emu_barrier(e); /* the previous block is done */
        if (w->tid == 0)
          for (int64_t i = 0; i < e->smem_floats; i++) e->smem[i] = NAN;
        emu_barrier(e);
        int32_t ids[4] = {w->tid, (int32_t)bx, (int32_t)by, (int32_t)bz};
        e->fn(e->args, ids, e->smem, emu_barrier, e);
        pthread_mutex_lock(&e->mu);
        int failed = e->failed;
        pthread_mutex_unlock(&e->mu);
        if (failed) return NULL;
      }
  return NULL;
}

int tlm_gpu_emulate(tlm_gpu_host_fn fn, const int64_t *args, const tlm_gpu_launch *launch,
                    char *err, int errcap) {
  if (launch->threads < 1 || launch->threads > 1024 || launch->smem_bytes < 0) {
    snprintf(err, (size_t)errcap, "launch out of range");
    return -1;
  }
  emu e;
  memset(&e, 0, sizeof e);
  e.fn = fn, e.args = args, e.l = *launch;
  e.smem_floats = launch->smem_bytes / 4;
  e.smem = malloc((size_t)(e.smem_floats ? e.smem_floats : 1) * sizeof(float));
  worker *ws = calloc((size_t)launch->threads, sizeof *ws);
  pthread_t *th = calloc((size_t)launch->threads, sizeof *th);
  if (!e.smem || !ws || !th) {
    free(e.smem), free(ws), free(th);
    snprintf(err, (size_t)errcap, "out of memory");
    return -1;
  }
  pthread_mutex_init(&e.mu, NULL);
  pthread_cond_init(&e.cv, NULL);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  int started = 0, rc = 0;
  for (; started < launch->threads; started++) {
    ws[started].e = &e, ws[started].tid = started;
    if (pthread_create(&th[started], &attr, worker_main, &ws[started])) break;
  }
  if (started < launch->threads) { /* the rest would wait forever: fail them */
    pthread_mutex_lock(&e.mu);
    e.failed = 1;
    pthread_cond_broadcast(&e.cv);
    pthread_mutex_unlock(&e.mu);
    snprintf(err, (size_t)errcap, "could not start %d host threads", launch->threads);
    rc = -1;
  }
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  pthread_attr_destroy(&attr);
  if (!rc && e.failed) {
    snprintf(err, (size_t)errcap, "the block's threads did not meet at a barrier");
    rc = -1;
  }
  pthread_mutex_destroy(&e.mu);
  pthread_cond_destroy(&e.cv);
  free(e.smem), free(ws), free(th);
  return rc;
}
