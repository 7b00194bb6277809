/* jit.c - ORC LLJIT set-up, optimization and compilation.
 * Error handling follows LLVM's OrcV2CBindings examples: every LLVMErrorRef
 * is consumed, ownership changes hands at the marked calls. */
#include "jit.h"

#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tlm_jit {
  LLVMOrcLLJITRef lljit;
  LLVMTargetMachineRef tm; /* for the optimization pipeline */
  char *triple, *cpu, *features;
};

static pthread_once_t g_llvm_once = PTHREAD_ONCE_INIT;
static int g_llvm_ok;

static void llvm_init(void) {
  g_llvm_ok = !LLVMInitializeNativeTarget() && !LLVMInitializeNativeAsmPrinter();
}

static void take_error(LLVMErrorRef e, const char *what, char *err, int errcap) {
  char *msg = LLVMGetErrorMessage(e); /* consumes e */
  snprintf(err, (size_t)errcap, "%s: %s", what, msg);
  LLVMDisposeErrorMessage(msg);
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

int tlm_jit_create(tlm_jit **out, char *err, int errcap) {
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
  char *t = LLVMGetDefaultTargetTriple(), *c = LLVMGetHostCPUName(),
       *f = LLVMGetHostCPUFeatures();
  j->triple = strdup(t);
  j->cpu = strdup(c);
  j->features = strdup(f);
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
  free(j->triple);
  free(j->cpu);
  free(j->features);
  free(j);
}

const char *tlm_jit_cpu(const tlm_jit *j) { return j->cpu; }
const char *tlm_jit_features(const tlm_jit *j) { return j->features; }

LLVMOrcThreadSafeContextRef tlm_jit_new_context(void) {
  return LLVMOrcCreateNewThreadSafeContext();
}

int tlm_jit_optimize(tlm_jit *j, LLVMModuleRef mod, const char *pipeline, char *err,
                     int errcap) {
  LLVMSetTarget(mod, j->triple);
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(j->tm);
  LLVMSetModuleDataLayout(mod, td);
  LLVMDisposeTargetData(td);
  LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
  LLVMErrorRef e = LLVMRunPasses(mod, pipeline, j->tm, opts);
  LLVMDisposePassBuilderOptions(opts);
  if (e) {
    take_error(e, "optimization failed", err, errcap);
    return -1;
  }
  return 0;
}

int tlm_jit_add(tlm_jit *j, LLVMOrcThreadSafeContextRef tsc, LLVMModuleRef mod,
                const char *name, void **fn, char *err, int errcap) {
  *fn = NULL;
  /* the thread-safe module takes mod and a reference to tsc */
  LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(mod, tsc);
  LLVMOrcDisposeThreadSafeContext(tsc);
  LLVMErrorRef e = LLVMOrcLLJITAddLLVMIRModule(j->lljit, LLVMOrcLLJITGetMainJITDylib(j->lljit),
                                               tsm); /* takes tsm, even on error */
  if (e) {
    take_error(e, "cannot add module", err, errcap);
    return -1;
  }
  LLVMOrcExecutorAddress addr = 0;
  e = LLVMOrcLLJITLookup(j->lljit, &addr, name);
  if (e) {
    take_error(e, "cannot compile kernel", err, errcap);
    return -1;
  }
  *fn = (void *)(uintptr_t)addr;
  return 0;
}
