/* clock.h - the monotonic clock every layer and tool times with (internal). */
#ifndef TLM_RUNTIME_CLOCK_H
#define TLM_RUNTIME_CLOCK_H

#include <time.h>

/* Milliseconds of CLOCK_MONOTONIC (an arbitrary origin). Thread-safe. */
static inline double tlm_clock_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Nanoseconds of the same clock. */
static inline double tlm_clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

#endif
