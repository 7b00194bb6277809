/* jit.h - LLVM ORC LLJIT wrapper for the host CPU (internal). */
#ifndef TLM_JIT_JIT_H
#define TLM_JIT_JIT_H

#include <llvm-c/Core.h>
#include <llvm-c/Orc.h>

typedef struct tlm_jit tlm_jit;

/* Sets up LLVM's native target, a target machine for the host CPU and its
 * features, and an LLJIT that resolves libc/libm symbols from the process.
 * Returns 0, or -1 with a message in err. Thread-safe. */
int tlm_jit_create(tlm_jit **out, char *err, int errcap);
void tlm_jit_destroy(tlm_jit *j);

/* Host CPU name and feature string used for code generation (owned by j). */
const char *tlm_jit_cpu(const tlm_jit *j);
const char *tlm_jit_features(const tlm_jit *j);

/* A fresh context for one module (the caller hands it back through
 * tlm_jit_add or frees it with LLVMOrcDisposeThreadSafeContext). */
LLVMOrcThreadSafeContextRef tlm_jit_new_context(void);

/* Runs the new-pass-manager pipeline `pipeline` (e.g. "default<O3>") on mod
 * for the host target machine. Returns 0, or -1 with a message. */
int tlm_jit_optimize(tlm_jit *j, LLVMModuleRef mod, const char *pipeline, char *err,
                     int errcap);

/* Adds an optimized module (consumed, with its context) to the JIT and
 * looks up `name`, compiling it to native code. Returns 0 and *fn, or -1
 * with a message. Thread-safe. */
int tlm_jit_add(tlm_jit *j, LLVMOrcThreadSafeContextRef tsc, LLVMModuleRef mod,
                const char *name, void **fn, char *err, int errcap);

#endif
