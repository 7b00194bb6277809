/* records.h - measured-schedule records (train/): reading them back, the
 * best schedule of each task, the machine it was measured on, the split
 * into training and held-out families. */
#ifndef TLM_TRAIN_RECORDS_H
#define TLM_TRAIN_RECORDS_H

#include <cjson/cJSON.h>

#include "runtime/space.h"
#include "runtime/target.h"

/* The version of the records this build writes and reads ("v"). */
#define TLM_RECORD_VERSION 1

/* Called per record; return non-zero to stop. */
typedef int (*tlm_record_fn)(void *ctx, const cJSON *record);

/* Reads a records file (gzip JSON lines, several members allowed; torn or
 * unknown-version lines are skipped). Returns the number of records, -1 if
 * the file cannot be opened. */
int tlm_records_read(const char *path, tlm_record_fn fn, void *ctx);

/* Task families held out of training (prefixes of the records' "family"):
 * GPT-2-355M's layers and attention, the benchdnn Transformer shapes and
 * GPT-J with 2016-token prompts. NULL-terminated. */
extern const char *const tlm_heldout_families[];
int tlm_family_heldout(const char *family);

/* Best measured schedule of one task in a records file. */
typedef struct tlm_best {
  char task[160], family[48];
  /* the tlm_isa its records were measured for (from their "hw" text:
   * "<cpu>; <isa>[+vnni] ..."); records of one task under two ISAs are
   * two entries */
  int isa;
  /* the machine they were measured on, rebuilt from "hw"
   * (tlm_target_from_hw) when has_target; entries are per task and hw
   * text, so one task measured on two CPUs is two entries */
  int has_target;
  tlm_target target;
  uint64_t hw_id; /* XXH3 of the hw text with its low bit set, 0 when absent */
  tlm_schedule sched;
  double ns;         /* best median time */
  double default_ns; /* the default rule's, INFINITY if not measured */
  int records;
  /* every ok measurement of the task (schedule, median ns), malloc'd */
  tlm_schedule *all;
  double *all_ns, *all_spread; /* median ns; (max - min) / median of its samples */
  int nall, capall;
  /* the records of the task's --verify rounds (timed side by side),
   * malloc'd; nver = 0 when it has none; ver_round: the latest round */
  tlm_schedule *ver;
  double *ver_ns; /* median ns, INFINITY when not ok */
  int *ver_rd;    /* each record's round */
  int nver, capver, ver_round;
} tlm_best;

/* Best schedule per task; split 0 = training families, 1 = held out,
 * -1 = all. Returns the count (*out malloc'd; free with tlm_best_free), -1
 * if unreadable. */
int tlm_best_load(const char *records, int split, tlm_best **out);

/* The ISA of a record's "hw" text, -1 when it names none. */
int tlm_record_isa(const char *hw);

/* Rebuilds the target a record was measured on from its "hw" text, which
 * the collector writes as the LLVM CPU name, "; " and tlm_target_str:
 *   "<cpu>; <isa>[+vnni] L lanes, R regs, [FMA PxB lat N (C chains), ]
 *    N cores, L1 xK L2 yK L3 zK[ shared by S][, ...][; host <isa>; <brand> (family F
 *    model M)]"
 * The bracketed parts are missing from older records: the vendor and
 * family then come from the CPU name (znver1-5: AMD families 17h-1Ah;
 * other names: Intel family 6) and the FMA datapath from the vendor table
 * (tlm_target_complete). threads = cores (the collector ran one worker per
 * CPU). Returns 0, or -1 when the text names no ISA or caches. */
int tlm_target_from_hw(const char *hw, tlm_target *out);

/* The target an entry's records were measured on: the one rebuilt from
 * their hw text when there is one, else `host` narrowed to the entry's ISA
 * (records without hw were collected under TLM_ISA on this machine).
 * Returns 0, or -1 when neither works (the entry is then skipped). */
int tlm_best_target(const tlm_best *b, const tlm_target *host, tlm_target *out);
void tlm_best_free(tlm_best *b, int n);

/* Fastest measured time of exactly `sched` in b (INFINITY if never
 * measured); *spread (if not NULL) gets that measurement's relative spread. */
double tlm_best_time_of(const tlm_best *b, const tlm_schedule *sched, double *spread);

/* The same from the latest verification round only (INFINITY if absent). */
double tlm_best_verified_time_of(const tlm_best *b, const tlm_schedule *sched);

/* Leaves the verification rounds after `round` out of the next
 * tlm_best_load calls (tlm train --max-round: the data as it was before
 * them). Not thread-safe; default: every round. */
void tlm_best_set_max_round(int round);

#endif
