/* status.h - status texts and the version string below the API (internal).
 *
 * The public tlm_status_str() and tlm_version() return these; layers below
 * api/ use them directly so that nothing in libtlm calls its own public
 * API. */
#ifndef TLM_RUNTIME_STATUS_H
#define TLM_RUNTIME_STATUS_H

#include "tlm.h"

#define TLM_STR_(x) #x
#define TLM_STR(x) TLM_STR_(x)
/* "MAJOR.MINOR.PATCH" of this build, from tlm.h's TLM_VERSION_* */
#define TLM_VERSION_TEXT \
  TLM_STR(TLM_VERSION_MAJOR) "." TLM_STR(TLM_VERSION_MINOR) "." TLM_STR(TLM_VERSION_PATCH)

/* A short English text for s ("unknown status" outside tlm_status). Static
 * storage; thread-safe. */
const char *tlm_status_text(tlm_status s);

#endif
