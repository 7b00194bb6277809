/* status.c - status texts (see status.h). */
#include "status.h"

const char *tlm_status_text(tlm_status s) {
  static const char *const text[TLM_STATUS_COUNT_] = {
      [TLM_OK] = "success",
      [TLM_ERR_NULL_POINTER] = "null pointer",
      [TLM_ERR_INVALID_ARGUMENT] = "invalid argument",
      [TLM_ERR_SHAPE_MISMATCH] = "shape mismatch",
      [TLM_ERR_DTYPE_MISMATCH] = "data type mismatch",
      [TLM_ERR_OVERFLOW] = "size overflow",
      [TLM_ERR_ALIASING] = "output overlaps itself or an input",
      [TLM_ERR_UNSUPPORTED] = "unsupported",
      [TLM_ERR_OUT_OF_MEMORY] = "out of memory",
      [TLM_ERR_JIT] = "JIT compilation failed",
      [TLM_ERR_IO] = "I/O error",
      [TLM_ERR_FORMAT] = "file format error",
      [TLM_ERR_THREAD] = "thread creation failed",
      [TLM_ERR_INTERNAL] = "internal error",
      [TLM_ERR_NO_DEVICE] = "no GPU device",
  };
  if ((int)s < 0 || s >= TLM_STATUS_COUNT_ || !text[s]) return "unknown status";
  return text[s];
}
