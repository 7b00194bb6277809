/* test_gpu_api.c - GPU tensors through the public API without a GPU (#21).
 *
 * Usage: test_gpu_api FAKE_LIBCUDA [SHARED_DIR]
 *
 *  - no driver: a GPU call returns TLM_ERR_NO_DEVICE with the reason, every
 *    time, and host calls of the same runtime still run;
 *  - bad requests are refused before the driver is touched: mixed devices,
 *    an unknown device value, a stream with host tensors, operators with no
 *    GPU kernels, shape errors;
 *  - with tests/fake_cuda.c as the driver (TLM_CUDA_LIBRARY): host memory
 *    passed as device memory is refused; matmuls of odd shapes, batches,
 *    broadcasts, transposes, bias and residual are launched with the
 *    arguments and geometry the kernels expect (the fake computes the
 *    product from them) and agree with the reference; a second shape of the
 *    same kernel class loads no new module; tlm_run_on_stream enqueues; a
 *    driver whose cuInit fails gives TLM_ERR_NO_DEVICE.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train/problem.h"

typedef int (*alloc_fn)(unsigned long long *, size_t);
typedef int (*free_fn)(unsigned long long);
typedef int (*count_fn)(void);

static alloc_fn g_alloc;
static free_fn g_free;

/* p's tensors as GPU tensors over copies in fake device memory */
static int to_device(const tlm_problem *p, tlm_tensor *in, tlm_tensor *out, unsigned long long *mem) {
  for (int i = 0; i <= p->n_in; i++) {
    const tlm_tensor *t = i < p->n_in ? &p->in[i] : &p->out;
    size_t bytes = tlm_tensor_span_bytes(t);
    if (g_alloc(&mem[i], bytes)) return -1;
    memcpy((void *)(uintptr_t)mem[i], t->data, bytes);
    tlm_tensor d = *t;
    d.data = (void *)(uintptr_t)mem[i];
    d.device = TLM_DEVICE_CUDA;
    if (i < p->n_in)
      in[i] = d;
    else
      *out = d;
  }
  return 0;
}

static void free_device(const tlm_problem *p, unsigned long long *mem) {
  for (int i = 0; i <= p->n_in; i++) g_free(mem[i]);
}

/* files in DIR/kernels whose name ends with ext; the first one's path */
static int count_files(const char *dir, const char *ext, char *first, size_t cap) {
  char path[1024];
  snprintf(path, sizeof path, "%s/kernels", dir);
  DIR *d = opendir(path);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
    size_t l = strlen(e->d_name), le = strlen(ext);
    if (l > le && !strcmp(e->d_name + l - le, ext)) {
      if (!n && first) snprintf(first, cap, "%s/%s", path, e->d_name);
      n++;
    }
  }
  if (d) closedir(d);
  return n;
}

/* one GPU matmul of desc on a fresh runtime with cache dir `dir`: 0 when
 * it ran and agreed with the reference */
static int run_once(const tlm_config *base, const char *dir, const char *desc) {
  tlm_config cfg = *base;
  cfg.cache_dir = dir;
  tlm_runtime *rt;
  if (tlm_create(&cfg, &rt) != TLM_OK) return -1;
  tlm_mm_desc d;
  char err[256];
  tlm_mm_desc_parse(desc, &d, err, sizeof err);
  tlm_problem p;
  int rc = -1;
  if (!tlm_problem_make(&d, NULL, 5, &p)) {
    tlm_tensor in[4], out;
    unsigned long long mem[5];
    if (!to_device(&p, in, &out, mem)) {
      if (tlm_run(rt, &p.op, in, p.n_in, &out, 1) == TLM_OK) {
        memcpy(p.out.data, (void *)(uintptr_t)mem[p.n_in], tlm_tensor_span_bytes(&p.out));
        rc = tlm_problem_check(&p) <= tlm_problem_tolerance(d.a[d.nda - 1]) ? 0 : -1;
      }
      free_device(&p, mem);
    }
    tlm_problem_free(&p);
  }
  tlm_destroy(rt);
  return rc;
}

/* threads making GPU calls on one runtime at once, the first ones
 * included (the GPU state is created by whichever comes first) */
typedef struct worker {
  tlm_runtime *rt;
  int id, failures;
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  tlm_mm_desc d;
  char err[256];
  tlm_mm_desc_parse(w->id % 2 ? "7x13:13x5" : "2x3x17:2x17x19", &d, err, sizeof err);
  tlm_problem p;
  if (tlm_problem_make(&d, NULL, 100 + (uint64_t)w->id, &p)) return w->failures++, NULL;
  tlm_tensor in[4], out;
  unsigned long long mem[5];
  if (to_device(&p, in, &out, mem)) {
    tlm_problem_free(&p);
    return w->failures++, NULL;
  }
  for (int r = 0; r < 20; r++) {
    if (tlm_run(w->rt, &p.op, in, p.n_in, &out, 1) != TLM_OK) w->failures++;
    memcpy(p.out.data, (void *)(uintptr_t)mem[p.n_in], tlm_tensor_span_bytes(&p.out));
    if (!(tlm_problem_check(&p) <= tlm_problem_tolerance(d.a[d.nda - 1]))) w->failures++;
  }
  free_device(&p, mem);
  tlm_problem_free(&p);
  return NULL;
}

int main(int argc, char **argv) {
  const char *fake = argc > 1 ? argv[1] : NULL;
  tlm_config cfg;
  tlm_config_init(&cfg);
  cfg.cache_dir = "none";
  cfg.num_threads = 1;
  tlm_mm_desc d;
  char err[256];
  tlm_mm_desc_parse("7x13:13x5", &d, err, sizeof err);
  tlm_problem p;
  CHECK(tlm_problem_make(&d, NULL, 1, &p) == 0, "problem");

  /* no driver */
  setenv("TLM_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
  tlm_runtime *rt = NULL;
  CHECK(tlm_create(&cfg, &rt) == TLM_OK, "create: %s", tlm_last_error(NULL));
  tlm_tensor in[4], out;
  memcpy(in, p.in, sizeof in);
  out = p.out;
  for (int i = 0; i < p.n_in; i++) in[i].device = TLM_DEVICE_CUDA;
  out.device = TLM_DEVICE_CUDA;
  for (int rep = 0; rep < 2; rep++) {
    tlm_status st = tlm_run(rt, &p.op, in, p.n_in, &out, 1);
    CHECK(st == TLM_ERR_NO_DEVICE && strstr(tlm_last_error(rt), "no CUDA driver"),
          "no driver, call %d: %d %s", rep, (int)st, tlm_last_error(rt));
  }
  CHECK(tlm_run(rt, &p.op, p.in, p.n_in, &p.out, 1) == TLM_OK, "host call after: %s",
        tlm_last_error(rt));
  CHECK(tlm_problem_check(&p) <= tlm_problem_tolerance(13), "host result");
  /* refused before the driver */
  tlm_tensor mixed[4];
  memcpy(mixed, in, sizeof mixed);
  mixed[1].device = TLM_DEVICE_CPU;
  CHECK(tlm_run(rt, &p.op, mixed, p.n_in, &out, 1) == TLM_ERR_INVALID_ARGUMENT, "mixed devices");
  mixed[1].device = 5;
  CHECK(tlm_run(rt, &p.op, mixed, p.n_in, &out, 1) == TLM_ERR_INVALID_ARGUMENT, "device 5");
  CHECK(tlm_run_on_stream(rt, &p.op, p.in, p.n_in, &p.out, 1, (void *)16) ==
            TLM_ERR_INVALID_ARGUMENT,
        "stream with host tensors");
  CHECK(tlm_run_on_stream(rt, &p.op, p.in, p.n_in, &p.out, 1, NULL) == TLM_OK,
        "tlm_run_on_stream on the host: %s", tlm_last_error(rt));
  tlm_tensor badout = out;
  badout.shape[1] = 6;
  CHECK(tlm_run(rt, &p.op, in, p.n_in, &badout, 1) == TLM_ERR_SHAPE_MISMATCH, "shape error first");
  tlm_op ew = tlm_op_eltwise(TLM_ACT_RELU, TLM_BINARY_NONE);
  tlm_tensor ewout = in[0]; /* x's shape over C's (never read: refused first) */
  ewout.data = out.data;
  CHECK(tlm_run(rt, &ew, in, 1, &ewout, 1) == TLM_ERR_UNSUPPORTED, "eltwise on GPU: %s",
        tlm_last_error(rt));
  ewout.shape[0] += 1;
  CHECK(tlm_run(rt, &ew, in, 1, &ewout, 1) == TLM_ERR_SHAPE_MISMATCH,
        "eltwise shape error on GPU tensors: validated first (%s)", tlm_last_error(rt));
  /* a residual that is C itself runs on the host only */
  tlm_op ip = p.op;
  ip.u.matmul.has_residual = 1;
  tlm_tensor in3[3] = {in[0], in[1], out};
  CHECK(tlm_run(rt, &ip, in3, 3, &out, 1) == TLM_ERR_UNSUPPORTED, "in-place residual on GPU: %s",
        tlm_last_error(rt));
  tlm_op bad = p.op;
  bad.kind = (tlm_op_kind)77;
  CHECK(tlm_run(rt, &bad, in, p.n_in, &out, 1) == TLM_ERR_INVALID_ARGUMENT, "unknown kind on GPU");
  CHECK(tlm_run_on_stream(rt, &p.op, NULL, 2, &out, 1, (void *)16) == TLM_ERR_NULL_POINTER,
        "NULL inputs with a stream");
  CHECK(tlm_run_on_stream(rt, &p.op, in, 9, &out, 1, (void *)16) == TLM_ERR_INVALID_ARGUMENT &&
            !strstr(tlm_last_error(rt), "stream"),
        "9 inputs with a stream: %s", tlm_last_error(rt));
  tlm_tensor resv[4];
  memcpy(resv, in, sizeof resv);
  resv[0].reserved_ = 1;
  CHECK(tlm_run(rt, &p.op, resv, p.n_in, &out, 1) == TLM_ERR_INVALID_ARGUMENT, "reserved_ set");
  tlm_destroy(rt);

  if (!fake) {
    printf("note: no fake driver given: the launch path is not run\n");
    tlm_problem_free(&p);
    return check_report("gpu_api");
  }
  void *h = dlopen(fake, RTLD_NOW);
  CHECK(h != NULL, "dlopen %s: %s", fake, dlerror());
  if (!h) return check_report("gpu_api");
  g_alloc = (alloc_fn)dlsym(h, "cuMemAlloc_v2");
  g_free = (free_fn)dlsym(h, "cuMemFree_v2");
  count_fn modules = (count_fn)dlsym(h, "fake_cuda_modules");
  count_fn launches = (count_fn)dlsym(h, "fake_cuda_launches");
  setenv("TLM_CUDA_LIBRARY", fake, 1);

  /* cuInit failing */
  setenv("FAKE_CUDA_FAIL", "init", 1);
  CHECK(tlm_create(&cfg, &rt) == TLM_OK, "create");
  tlm_status st = tlm_run(rt, &p.op, in, p.n_in, &out, 1);
  CHECK(st == TLM_ERR_NO_DEVICE && strstr(tlm_last_error(rt), "did not start"),
        "cuInit failing: %d %s", (int)st, tlm_last_error(rt));
  tlm_destroy(rt);
  unsetenv("FAKE_CUDA_FAIL");

  cfg.cuda_device = 5000;
  CHECK(tlm_create(&cfg, &rt) == TLM_ERR_INVALID_ARGUMENT, "cuda_device 5000");
  cfg.cuda_device = 1;
  CHECK(tlm_create(&cfg, &rt) == TLM_OK, "create");
  st = tlm_run(rt, &p.op, in, p.n_in, &out, 1);
  CHECK(st == TLM_ERR_NO_DEVICE && strstr(tlm_last_error(rt), "no CUDA device 1"),
        "device 1: %d %s", (int)st, tlm_last_error(rt));
  tlm_destroy(rt);
  cfg.cuda_device = 0;

  CHECK(tlm_create(&cfg, &rt) == TLM_OK, "create");
  /* host memory as device memory */
  st = tlm_run(rt, &p.op, in, p.n_in, &out, 1);
  CHECK(st == TLM_ERR_INVALID_ARGUMENT && strstr(tlm_last_error(rt), "not CUDA device"),
        "host memory as device memory: %d %s", (int)st, tlm_last_error(rt));
  tlm_problem_free(&p);

  static const char *const shapes[] = {"1x1:1x1",       "7x13:13x5",       "37x129:129x61",
                                       "2x3x17:2x17x19", "3x1x31:1x31x7",   "2x2x5x9:2x2x9x11",
                                       "64x64:64x64",    "64x65:65x64",     "129x17:17x130"};
  int before = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    for (int variant = 0; variant < 3; variant++) {
      tlm_mm_desc_parse(shapes[s], &d, err, sizeof err);
      tlm_matmul_desc epi;
      memset(&epi, 0, sizeof epi);
      epi.has_bias = variant == 1;
      epi.has_residual = variant == 2;
      d.transpose_a = variant == 1;
      d.transpose_b = variant == 2;
      if (tlm_problem_make(&d, &epi, 7 + s, &p)) {
        CHECK(0, "problem %s", shapes[s]);
        continue;
      }
      unsigned long long mem[5];
      CHECK(to_device(&p, in, &out, mem) == 0, "device memory");
      if (s == 7 && variant == 0) before = modules();
      int l0 = launches();
      st = variant == 0 ? tlm_run(rt, &p.op, in, p.n_in, &out, 1)
                        : tlm_run_on_stream(rt, &p.op, in, p.n_in, &out, 1, NULL);
      CHECK(st == TLM_OK, "%s variant %d: %s", shapes[s], variant, tlm_last_error(rt));
      CHECK(launches() == l0 + 1, "one launch");
      memcpy(p.out.data, (void *)(uintptr_t)mem[p.n_in], tlm_tensor_span_bytes(&p.out));
      double e = tlm_problem_check(&p);
      CHECK(e >= 0 && e <= tlm_problem_tolerance(d.a[d.nda - 1]), "%s variant %d: error %g",
            shapes[s], variant, e);
      if (s == 7 && variant == 0)
        CHECK(modules() == before, "K 65 reuses K 64's module (%d -> %d)", before,
              modules());
      free_device(&p, mem);
      tlm_problem_free(&p);
    }
  }
  /* a buffer shorter than the tensor: its end is not device memory */
  {
    tlm_mm_desc_parse("9x10:10x11", &d, err, sizeof err);
    CHECK(tlm_problem_make(&d, NULL, 3, &p) == 0, "problem");
    unsigned long long mem[5];
    CHECK(to_device(&p, in, &out, mem) == 0, "device memory");
    unsigned long long shortb;
    CHECK(g_alloc(&shortb, 8) == 0, "short buffer");
    in[1].data = (void *)(uintptr_t)shortb;
    st = tlm_run(rt, &p.op, in, p.n_in, &out, 1);
    CHECK(st == TLM_ERR_INVALID_ARGUMENT && strstr(tlm_last_error(rt), "to its end"),
          "B shorter than its tensor: %d %s", (int)st, tlm_last_error(rt));
    g_free(shortb);
    free_device(&p, mem);
    tlm_problem_free(&p);
  }
  /* row operators (the fake computes softmax with scale 1, layernorm and
   * rmsnorm with eps 1e-5 from the arguments) on strided rows */
  static const tlm_op_kind rk[3] = {TLM_OP_SOFTMAX, TLM_OP_LAYERNORM, TLM_OP_RMSNORM};
  for (int q = 0; q < 3; q++) {
    int64_t R = 5, C = 37, ld = 40;
    float hx[5 * 40], hg[37], hb[37], hy[5 * 40];
    for (int i = 0; i < R * ld; i++) hx[i] = (float)((i * 37) % 23) * 0.25f - 2.5f;
    for (int i = 0; i < C; i++) hg[i] = 1.0f + 0.01f * (float)i, hb[i] = 0.1f * (float)(i % 3);
    unsigned long long dx, dy, dg, db;
    CHECK(!g_alloc(&dx, sizeof hx) && !g_alloc(&dy, sizeof hy) && !g_alloc(&dg, sizeof hg) &&
              !g_alloc(&db, sizeof hb),
          "alloc");
    memcpy((void *)(uintptr_t)dx, hx, sizeof hx);
    memcpy((void *)(uintptr_t)dg, hg, sizeof hg);
    memcpy((void *)(uintptr_t)db, hb, sizeof hb);
    tlm_tensor rt_in[3], rt_out;
    memset(rt_in, 0, sizeof rt_in);
    rt_in[0].dtype = TLM_F32, rt_in[0].ndim = 2, rt_in[0].shape[0] = R, rt_in[0].shape[1] = C;
    rt_in[0].strides[0] = ld, rt_in[0].strides[1] = 1, rt_in[0].data = (void *)(uintptr_t)dx;
    rt_out = rt_in[0];
    rt_out.data = (void *)(uintptr_t)dy;
    tlm_tensor_dense(&rt_in[1], TLM_F32, 1, &C, (void *)(uintptr_t)dg);
    tlm_tensor_dense(&rt_in[2], TLM_F32, 1, &C, (void *)(uintptr_t)db);
    for (int i = 0; i < 3; i++) rt_in[i].device = TLM_DEVICE_CUDA;
    rt_out.device = TLM_DEVICE_CUDA;
    tlm_op op = tlm_op_rownorm(rk[q]);
    int nin = rk[q] == TLM_OP_SOFTMAX ? 1 : rk[q] == TLM_OP_LAYERNORM ? 3 : 2;
    for (int rep = 0; rep < 2; rep++) { /* a miss, then a hit */
      st = tlm_run(rt, &op, rt_in, nin, &rt_out, 1);
      CHECK(st == TLM_OK, "row kind %d: %s", (int)rk[q], tlm_last_error(rt));
    }
    /* the reference on the host copies */
    tlm_tensor h_in[3], h_out;
    memcpy(h_in, rt_in, sizeof h_in);
    h_out = rt_out;
    h_in[0].data = hx, h_in[1].data = hg, h_in[2].data = hb, h_out.data = hy;
    for (int i = 0; i < 3; i++) h_in[i].device = TLM_DEVICE_CPU;
    h_out.device = TLM_DEVICE_CPU;
    tlm_runtime *host;
    tlm_config hc = cfg;
    hc.cache_dir = "none";
    CHECK(tlm_create(&hc, &host) == TLM_OK, "host runtime");
    CHECK(tlm_run(host, &op, h_in, nin, &h_out, 1) == TLM_OK, "host row: %s", tlm_last_error(host));
    tlm_destroy(host);
    double worst = 0;
    const float *gy = (const float *)(uintptr_t)dy;
    for (int r = 0; r < R; r++)
      for (int c = 0; c < C; c++) {
        double e = fabs((double)gy[r * ld + c] - hy[r * ld + c]) / (1 + fabs((double)hy[r * ld + c]));
        if (!(e <= worst)) worst = e;
      }
    CHECK(worst <= 1e-5, "row kind %d through the GPU path: error %g", (int)rk[q], worst);
    g_free(dx), g_free(dy), g_free(dg), g_free(db);
  }
  /* every GPU call counted once as a hit or a miss */
  tlm_stats stt;
  CHECK(tlm_get_stats(rt, &stt) == TLM_OK, "stats");
  CHECK(stt.cache_hits >= 3, "the repeated row calls were hits (%llu hits)",
        (unsigned long long)stt.cache_hits);
  CHECK(stt.cache_hits + stt.cache_misses + stt.cache_waits == stt.runs,
        "hits %llu + misses %llu + waits %llu != runs %llu", (unsigned long long)stt.cache_hits,
        (unsigned long long)stt.cache_misses, (unsigned long long)stt.cache_waits,
        (unsigned long long)stt.runs);
  printf("gpu_api: %d modules loaded for %d launches\n", modules(), launches());
  tlm_destroy(rt);
  /* the disk cache keeps the PTX; a damaged entry is rebuilt */
  char dir[] = "/tmp/tlm_gpu_api_XXXXXX", obj[1200] = "";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  CHECK(run_once(&cfg, dir, "33x65:65x17") == 0, "cold disk cache");
  CHECK(count_files(dir, ".o", obj, sizeof obj) == 1, "one PTX entry stored");
  CHECK(run_once(&cfg, dir, "33x65:65x17") == 0, "warm disk cache");
  CHECK(count_files(dir, ".o", NULL, 0) == 1, "still one entry");
  FILE *f = fopen(obj, "r+");
  CHECK(f != NULL, "open %s", obj);
  if (f) {
    fseek(f, 200, SEEK_SET);
    fputc('#', f);
    fclose(f);
  }
  CHECK(run_once(&cfg, dir, "33x65:65x17") == 0, "damaged PTX entry: rebuilt");
  char cmd[1100];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0, "cleanup");
  /* 4 threads on a fresh runtime, first calls at once */
  CHECK(tlm_create(&cfg, &rt) == TLM_OK, "create");
  worker w[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (worker){rt, i, 0};
    CHECK(pthread_create(&th[i], NULL, worker_main, &w[i]) == 0, "thread");
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    CHECK(w[i].failures == 0, "thread %d: %d failures", i, w[i].failures);
  }
  tlm_destroy(rt);
  dlclose(h);
  return check_report("gpu_api");
}
