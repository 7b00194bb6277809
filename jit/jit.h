/* jit.h - LLVM ORC LLJIT wrapper for the host CPU (internal). */
#ifndef TLM_JIT_JIT_H
#define TLM_JIT_JIT_H

#include <llvm-c/Core.h>
#include <llvm-c/Orc.h>
#include <stdatomic.h>

typedef struct tlm_jit tlm_jit;

/* LLVM's process-wide code generation options, set once before any
 * codegen (every path that creates a target machine calls it first):
 * loop strength reduction is taken out of the code generator's fixed
 * pipeline (-disable-lsr) so that each kernel's pass pipeline text decides
 * it (TLM_PIPELINE_LSR appended where it pays). On matmul kernels, whose
 * addresses are already a base plus a stride per loop, LSR was a third of
 * object emission and changed no GFLOPS; on convolutions that gather a
 * window it is worth up to 2x (docs/design.md, "Compile time"). On x86-64
 * hosts the X86 domain reassignment pass is off as well
 * (-disable-x86-domain-reassignment: byte-identical kernels, 2-9% less
 * object emission). This is
 * LLVM's command-line state, shared with any other LLVM user in the
 * process: the environment variable TLM_LLVM_OPTIONS=0, read at the first
 * call, leaves it alone (the code generator then runs LSR on every
 * kernel, and compiles are slower), as does an LLVM major other than the
 * one this was tested with (19: LLVM's parser exits the process on an
 * option it does not know). Returns 1 when the code generator's LSR is
 * off, 0 when it was left on. Thread-safe; the first call decides. */
int tlm_jit_llvm_options(void);

/* The new pass manager's loop strength reduction, as pipeline text to
 * append after a function pipeline (with a comma). */
#define TLM_PIPELINE_LSR "function(loop(loop-reduce))"

/* Sets up LLVM's native target, a target machine for the host CPU and its
 * features, and an LLJIT that resolves libc/libm symbols from the process.
 * isa (a tlm_isa, or -1 for every host feature) turns off the host features
 * above that ISA (tlm_isa_features), so code for a narrower ISA never uses
 * wider instructions. Returns 0, or -1 with a message in err. Thread-safe. */
int tlm_jit_create(tlm_jit **out, int isa, char *err, int errcap);
void tlm_jit_destroy(tlm_jit *j);

/* Host CPU name and the feature string used for code generation (the
 * host's, less what the ISA of tlm_jit_create excludes; owned by j). */
const char *tlm_jit_cpu(const tlm_jit *j);
const char *tlm_jit_features(const tlm_jit *j);

/* Runs the new-pass-manager pipeline `pipeline` (e.g. "default<O1>") on mod
 * for the host CPU. Returns 0, or -1 with a message. Thread-safe (each
 * call holds one of j's target machines, kept for reuse, for itself). */
int tlm_jit_optimize(tlm_jit *j, LLVMModuleRef mod, const char *pipeline, char *err,
                     int errcap);

/* Optimizes mod and emits host object code: *obj (malloc'd, the caller
 * frees it) of *len bytes. mod stays the caller's. Thread-safe. */
/* Where a compile's time went, ms: the target machine's creation, the
 * optimization pipeline, object emission (instruction selection, register
 * allocation, encoding). */
typedef struct tlm_jit_times {
  double tm_ms, opt_ms, emit_ms;
} tlm_jit_times;

int tlm_jit_compile_object(tlm_jit *j, LLVMModuleRef mod, const char *pipeline, void **obj,
                           size_t *len, tlm_jit_times *times, char *err, int errcap);

/* The calling thread's compiles stop at their next stage boundary (before
 * the optimization passes, before object emission) once *flag is nonzero
 * (NULL: never): tlm_jit_compile_object then fails with "cancelled" and
 * tlm_jit_build with TLM_ERR_JIT. A stage already begun runs to its end.
 * The engine's background threads use it, so that tlm_destroy, or a build
 * a low-priority thread holds while the cores are busy, need not wait for
 * a whole compile on the little CPU time that thread gets. */
void tlm_jit_set_cancel(const atomic_int *flag);

/* 1 when the calling thread's cancel flag (tlm_jit_set_cancel) is set. */
int tlm_jit_cancel_requested(void);

/* JIT memory of one loaded object. */
typedef struct tlm_jit_code tlm_jit_code;

/* Links object code (copied) into the JIT under its own resource tracker
 * and returns the address of `name`. Thread-safe. */
int tlm_jit_load(tlm_jit *j, const void *obj, size_t len, const char *name, void **fn,
                 tlm_jit_code **code, char *err, int errcap);

/* Frees the JIT memory of a loaded object; its functions must no longer
 * run. NULL is a no-op. */
void tlm_jit_unload(tlm_jit *j, tlm_jit_code *code);

#endif
