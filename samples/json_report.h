/* json_report.h - how the samples write their --json reports (cJSON).
 * Header-only: each sample is one .c file built on the public API alone. */
#ifndef TLM_SAMPLES_JSON_REPORT_H
#define TLM_SAMPLES_JSON_REPORT_H

#include <stdio.h>
#include <cjson/cJSON.h>

/* `o` as one line of JSON in `path`, written to "path.tmp" and renamed over
 * path, so a failure never leaves a partial file. Returns 0, or -1 when it
 * could not be written whole (nothing is left behind then). */
static inline int sample_json_write(const cJSON *o, const char *path) {
  char *text = cJSON_PrintUnformatted(o);
  char tmp[4096];
  int fits = snprintf(tmp, sizeof tmp, "%s.tmp", path) < (int)sizeof tmp;
  FILE *f = text && fits ? fopen(tmp, "w") : NULL;
  int bad = !f || fputs(text, f) < 0 || fputc('\n', f) == EOF;
  if (f && fclose(f)) bad = 1;
  if (f && (bad || rename(tmp, path))) {
    remove(tmp);
    bad = 1;
  }
  cJSON_free(text);
  return bad ? -1 : 0;
}

#endif
