/* jit.c - ORC LLJIT set-up, optimization and compilation.
 * Error handling follows LLVM's OrcV2CBindings examples: every LLVMErrorRef
 * is consumed, ownership changes hands at the marked calls. */
#include "jit.h"

#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Object.h>
#include <llvm-c/Support.h>
#include <llvm/Config/llvm-config.h> /* LLVM_VERSION_MAJOR (plain C) */
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../runtime/target.h"
#include "../runtime/clock.h"

/* target machines kept for reuse: one is busy with one module at a time
 * (LLVM's TargetMachine is not safe for concurrent use), and reusing it
 * saves its creation and its subtarget's (about 2 ms of a 25 ms compile) */
#define TM_POOL 8

struct tlm_jit {
  LLVMOrcLLJITRef lljit;
  LLVMTargetMachineRef tm; /* for the optimization pipeline */
  char *triple, *cpu, *features;
  pthread_mutex_t pool_mu;
  LLVMTargetMachineRef pool[TM_POOL];
  int npool;
};

static pthread_once_t g_llvm_once = PTHREAD_ONCE_INIT;
static int g_llvm_ok;

static pthread_once_t g_options_once = PTHREAD_ONCE_INIT;

static int g_lsr_off;

static void set_options(void) {
  const char *e = getenv("TLM_LLVM_OPTIONS");
  if (e && !strcmp(e, "0")) return;
  /* LLVM's parser exits the process on an option it does not know: only
   * the majors whose options this code was tested with get them (the
   * others keep the code generator's LSR and domain reassignment: slower
   * compiles, same code). -disable-x86-domain-reassignment: the pass that
   * moves integer chains into AVX-512 mask registers found nothing to move
   * in any kernel tried (the objects of a matmul, a 3x3 and a depthwise
   * convolution and a 1x1 matmul byte-identical with and without it,
   * llc-19 -O3 -mcpu=rocketlake) and was 2-7% of object emission */
#if LLVM_VERSION_MAJOR == 19
#if defined(__x86_64__) /* an X86 backend option: x86-64 hosts only */
  const char *argv[] = {"tlm", "-disable-lsr", "-disable-x86-domain-reassignment"};
#else
  const char *argv[] = {"tlm", "-disable-lsr"};
#endif
  LLVMParseCommandLineOptions((int)(sizeof argv / sizeof argv[0]), argv, NULL);
  g_lsr_off = 1;
#endif
}

int tlm_jit_llvm_options(void) {
  pthread_once(&g_options_once, set_options);
  return g_lsr_off;
}

static void llvm_init(void) {
  tlm_jit_llvm_options();
  g_llvm_ok = !LLVMInitializeNativeTarget() && !LLVMInitializeNativeAsmPrinter();
}

static void take_error(LLVMErrorRef e, const char *what, char *err, int errcap) {
  char *msg = LLVMGetErrorMessage(e); /* consumes e */
  snprintf(err, (size_t)errcap, "%s: %s", what, msg);
  LLVMDisposeErrorMessage(msg);
}

static void report_silently(void *ctx, LLVMErrorRef e) {
  (void)ctx;
  LLVMConsumeError(e);
}

static LLVMTargetMachineRef make_tm(const tlm_jit *j, char *err, int errcap) {
  LLVMTargetRef target;
  char *msg = NULL;
  if (LLVMGetTargetFromTriple(j->triple, &target, &msg)) {
    snprintf(err, (size_t)errcap, "no LLVM target for %s: %s", j->triple, msg ? msg : "");
    LLVMDisposeMessage(msg);
    return NULL;
  }
  return LLVMCreateTargetMachine(target, j->triple, j->cpu, j->features,
                                 LLVMCodeGenLevelAggressive, LLVMRelocPIC,
                                 LLVMCodeModelJITDefault);
}

int tlm_jit_create(tlm_jit **out, int isa, char *err, int errcap) {
  *out = NULL;
  pthread_once(&g_llvm_once, llvm_init);
  if (!g_llvm_ok) {
    snprintf(err, (size_t)errcap, "LLVM native target could not be initialized");
    return -1;
  }
  tlm_jit *j = calloc(1, sizeof *j);
  if (!j) {
    snprintf(err, (size_t)errcap, "out of memory");
    return -1;
  }
  pthread_mutex_init(&j->pool_mu, NULL);
  char *t = LLVMGetDefaultTargetTriple(), *c = LLVMGetHostCPUName(),
       *f = LLVMGetHostCPUFeatures();
  j->triple = strdup(t);
  j->cpu = strdup(c);
  if (isa >= 0) { /* the host's features less every one above `isa` */
    size_t cap = strlen(f) + 1;
    j->features = malloc(cap);
    if (j->features) tlm_isa_features(isa, f, j->features, (int)cap);
  } else {
    j->features = strdup(f);
  }
  LLVMDisposeMessage(t);
  LLVMDisposeMessage(c);
  LLVMDisposeMessage(f);
  LLVMTargetMachineRef jit_tm = NULL;
  LLVMOrcLLJITBuilderRef builder = NULL;
  LLVMErrorRef e;
  if (!j->triple || !j->cpu || !j->features) {
    snprintf(err, (size_t)errcap, "out of memory");
    goto fail;
  }
  j->tm = make_tm(j, err, errcap);
  jit_tm = make_tm(j, err, errcap);
  if (!j->tm || !jit_tm) goto fail;
  builder = LLVMOrcCreateLLJITBuilder();
  /* the builder takes jit_tm; LLJIT creation takes the builder */
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(
      builder, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(jit_tm));
  jit_tm = NULL;
  e = LLVMOrcCreateLLJIT(&j->lljit, builder);
  builder = NULL;
  if (e) {
    take_error(e, "cannot create LLJIT", err, errcap);
    j->lljit = NULL;
    goto fail;
  }
  LLVMOrcDefinitionGeneratorRef gen;
  e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
      &gen, LLVMOrcLLJITGetGlobalPrefix(j->lljit), NULL, NULL);
  if (e) {
    take_error(e, "cannot resolve process symbols", err, errcap);
    goto fail;
  }
  LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(j->lljit), gen); /* takes gen */
  /* link errors are returned to the caller; without a reporter ORC would
   * also print them to stderr */
  LLVMOrcExecutionSessionSetErrorReporter(LLVMOrcLLJITGetExecutionSession(j->lljit),
                                          report_silently, NULL);
  *out = j;
  return 0;
fail:
  if (jit_tm) LLVMDisposeTargetMachine(jit_tm);
  tlm_jit_destroy(j);
  return -1;
}

void tlm_jit_destroy(tlm_jit *j) {
  if (!j) return;
  if (j->lljit) {
    LLVMErrorRef e = LLVMOrcDisposeLLJIT(j->lljit);
    if (e) LLVMConsumeError(e);
  }
  if (j->tm) LLVMDisposeTargetMachine(j->tm);
  for (int i = 0; i < j->npool; i++) LLVMDisposeTargetMachine(j->pool[i]);
  pthread_mutex_destroy(&j->pool_mu);
  free(j->triple);
  free(j->cpu);
  free(j->features);
  free(j);
}

const char *tlm_jit_cpu(const tlm_jit *j) { return j->cpu; }
const char *tlm_jit_features(const tlm_jit *j) { return j->features; }

struct tlm_jit_code {
  LLVMOrcResourceTrackerRef rt;
};

static double now_ms(void) { return tlm_clock_ms(); }

/* a target machine of the pool, or a new one; NULL with a message */
static LLVMTargetMachineRef take_tm(tlm_jit *j, char *err, int errcap) {
  LLVMTargetMachineRef tm = NULL;
  pthread_mutex_lock(&j->pool_mu);
  if (j->npool > 0) tm = j->pool[--j->npool];
  pthread_mutex_unlock(&j->pool_mu);
  return tm ? tm : make_tm(j, err, errcap);
}

static void give_tm(tlm_jit *j, LLVMTargetMachineRef tm) {
  pthread_mutex_lock(&j->pool_mu);
  if (j->npool < TM_POOL) {
    j->pool[j->npool++] = tm;
    tm = NULL;
  }
  pthread_mutex_unlock(&j->pool_mu);
  if (tm) LLVMDisposeTargetMachine(tm);
}

static int prepare(tlm_jit *j, LLVMModuleRef mod, const char *pipeline, LLVMTargetMachineRef *tm,
                   tlm_jit_times *times, char *err, int errcap) {
  double t0 = now_ms();
  *tm = take_tm(j, err, errcap);
  if (!*tm) return -1;
  double t1 = now_ms();
  LLVMSetTarget(mod, j->triple);
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(*tm);
  LLVMSetModuleDataLayout(mod, td);
  LLVMDisposeTargetData(td);
  LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
  LLVMErrorRef e = LLVMRunPasses(mod, pipeline, *tm, opts);
  LLVMDisposePassBuilderOptions(opts);
  if (times) {
    times->tm_ms = t1 - t0;
    times->opt_ms = now_ms() - t1;
  }
  if (e) {
    take_error(e, "optimization failed", err, errcap);
    give_tm(j, *tm);
    *tm = NULL;
    return -1;
  }
  return 0;
}

int tlm_jit_optimize(tlm_jit *j, LLVMModuleRef mod, const char *pipeline, char *err,
                     int errcap) {
  LLVMTargetMachineRef tm;
  if (prepare(j, mod, pipeline, &tm, NULL, err, errcap)) return -1;
  give_tm(j, tm);
  return 0;
}

static _Thread_local const atomic_int *tls_cancel;

void tlm_jit_set_cancel(const atomic_int *flag) { tls_cancel = flag; }

int tlm_jit_cancel_requested(void) { return tls_cancel && atomic_load(tls_cancel); }

int tlm_jit_compile_object(tlm_jit *j, LLVMModuleRef mod, const char *pipeline, void **obj,
                           size_t *len, tlm_jit_times *times, char *err, int errcap) {
  *obj = NULL;
  *len = 0;
  LLVMTargetMachineRef tm;
  if (tlm_jit_cancel_requested()) {
    snprintf(err, (size_t)errcap, "cancelled");
    return -1;
  }
  if (prepare(j, mod, pipeline, &tm, times, err, errcap)) return -1;
  if (tlm_jit_cancel_requested()) {
    give_tm(j, tm);
    snprintf(err, (size_t)errcap, "cancelled");
    return -1;
  }
  double t0 = now_ms();
  char *msg = NULL;
  LLVMMemoryBufferRef buf = NULL;
  int rc = 0;
  if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMObjectFile, &msg, &buf)) {
    snprintf(err, (size_t)errcap, "object emission failed: %s", msg ? msg : "");
    rc = -1;
  } else {
    size_t n = LLVMGetBufferSize(buf);
    *obj = malloc(n ? n : 1);
    if (*obj) {
      memcpy(*obj, LLVMGetBufferStart(buf), n);
      *len = n;
    } else {
      snprintf(err, (size_t)errcap, "out of memory");
      rc = -1;
    }
    LLVMDisposeMemoryBuffer(buf);
  }
  LLVMDisposeMessage(msg);
  give_tm(j, tm);
  if (times) times->emit_ms = now_ms() - t0;
  return rc;
}

/* TLM_PERF_MAP=1: each kernel loaded is named in /tmp/perf-PID.map (the
 * file `perf report` reads for JIT code: "START SIZE NAME" in hex), so
 * `perf record` profiles attribute samples to kernels. The size is the
 * kernel symbol's in its object file (0 when not found: the line is then
 * left out). One write(2) per line on an O_APPEND file: lines of
 * concurrent loads do not interleave. Failures are ignored (a profiling
 * aid, never a reason for a load to fail). */
static int perf_map_on(void) {
  static atomic_int on = -1; /* loads run on application and background threads */
  int v = atomic_load_explicit(&on, memory_order_relaxed);
  if (v < 0) {
    const char *e = getenv("TLM_PERF_MAP");
    v = e && !strcmp(e, "1");
    atomic_store_explicit(&on, v, memory_order_relaxed);
  }
  return v;
}

static uint64_t symbol_size(const void *obj, size_t len, const char *name) {
  LLVMMemoryBufferRef mb = LLVMCreateMemoryBufferWithMemoryRange(obj, len, "tlm-kernel", 0);
  char *msg = NULL;
  LLVMBinaryRef bin = mb ? LLVMCreateBinary(mb, NULL, &msg) : NULL;
  uint64_t size = 0;
  if (bin) {
    LLVMSymbolIteratorRef it = LLVMObjectFileCopySymbolIterator(bin);
    for (; it && !LLVMObjectFileIsSymbolIteratorAtEnd(bin, it); LLVMMoveToNextSymbol(it)) {
      const char *sn = LLVMGetSymbolName(it);
      if (sn && !strcmp(sn, name)) {
        size = LLVMGetSymbolSize(it);
        break;
      }
    }
    if (it) LLVMDisposeSymbolIterator(it);
    LLVMDisposeBinary(bin);
  }
  LLVMDisposeMessage(msg);
  if (mb) LLVMDisposeMemoryBuffer(mb);
  return size;
}

static void perf_map_add(const void *obj, size_t len, const char *name, void *fn) {
  uint64_t size = symbol_size(obj, len, name);
  if (!size) return;
  char path[64], line[320];
  snprintf(path, sizeof path, "/tmp/perf-%ld.map", (long)getpid());
  int n = snprintf(line, sizeof line, "%lx %lx %s\n", (unsigned long)(uintptr_t)fn,
                   (unsigned long)size, name);
  if (n <= 0 || n >= (int)sizeof line) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  ssize_t w = write(fd, line, (size_t)n);
  (void)w;
  close(fd);
}

int tlm_jit_load(tlm_jit *j, const void *obj, size_t len, const char *name, void **fn,
                 tlm_jit_code **code, char *err, int errcap) {
  *fn = NULL;
  *code = calloc(1, sizeof **code);
  if (!*code) {
    snprintf(err, (size_t)errcap, "out of memory");
    return -1;
  }
  (*code)->rt = LLVMOrcJITDylibCreateResourceTracker(LLVMOrcLLJITGetMainJITDylib(j->lljit));
  LLVMMemoryBufferRef buf =
      LLVMCreateMemoryBufferWithMemoryRangeCopy(obj, len, "tlm-kernel");
  /* takes buf, even on error */
  LLVMErrorRef e = LLVMOrcLLJITAddObjectFileWithRT(j->lljit, (*code)->rt, buf);
  if (!e) {
    LLVMOrcExecutorAddress addr = 0;
    e = LLVMOrcLLJITLookup(j->lljit, &addr, name);
    if (!e) *fn = (void *)(uintptr_t)addr;
    if (!e && perf_map_on()) perf_map_add(obj, len, name, *fn);
  }
  if (e) {
    take_error(e, "cannot link kernel", err, errcap);
    tlm_jit_unload(j, *code);
    *code = NULL;
    return -1;
  }
  return 0;
}

void tlm_jit_unload(tlm_jit *j, tlm_jit_code *code) {
  (void)j;
  if (!code) return;
  LLVMErrorRef e = LLVMOrcResourceTrackerRemove(code->rt);
  if (e) LLVMConsumeError(e);
  LLVMOrcReleaseResourceTracker(code->rt);
  free(code);
}
