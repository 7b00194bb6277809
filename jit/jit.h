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

/* Runs the new-pass-manager pipeline `pipeline` (e.g. "default<O1>") on mod
 * for the host CPU. Returns 0, or -1 with a message. Thread-safe (each
 * call uses its own target machine). */
int tlm_jit_optimize(tlm_jit *j, LLVMModuleRef mod, const char *pipeline, char *err,
                     int errcap);

/* Optimizes mod and emits host object code: *obj (malloc'd, the caller
 * frees it) of *len bytes. mod stays the caller's. Thread-safe. */
int tlm_jit_compile_object(tlm_jit *j, LLVMModuleRef mod, const char *pipeline, void **obj,
                           size_t *len, char *err, int errcap);

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
