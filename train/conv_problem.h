/* conv_problem.h - benchdnn convolution descriptors, convolution test
 * problems and their reference check (train/: the collector, the tools,
 * tests and benches share it). */
#ifndef TLM_TRAIN_CONV_PROBLEM_H
#define TLM_TRAIN_CONV_PROBLEM_H

#include <stdint.h>

#include "tlm.h"

/* A parsed benchdnn convolution descriptor, after benchdnn's defaults
 * (oneDNN tests/benchdnn/conv/conv_aux.cpp, str2desc): mb 2, g 1, strides 1,
 * missing w (then h) dims copied from h (d), missing output extents
 * computed, missing padding chosen so the output fits. Dilations are
 * benchdnn's (0 = dense). ndims: 3, 4 or 5 (1-D, 2-D, 3-D). */
typedef struct tlm_conv_prb {
  int64_t g, mb, ic, oc;
  int64_t id, ih, iw, od, oh, ow, kd, kh, kw;
  int64_t sd, sh, sw, pd, ph, pw, dd, dh, dw;
  int ndims;
  char name[64];
} tlm_conv_prb;

/* Parses one line such as "mb1ic64ih56oc64oh56kh3ph1n\"resnet\"". Returns 1
 * with *p filled, 0 for a line with no problem (blank, comment, or text
 * that does not start like a conv descriptor: a digit or a known field),
 * -1 with a message that names the offending field and its column. */
int tlm_conv_prb_parse(const char *line, tlm_conv_prb *p, char *err, int errcap);

/* Canonical descriptor text. */
char *tlm_conv_prb_str(const tlm_conv_prb *p, char *buf, int cap);

/* Epilogue flags of a test problem. */
typedef struct tlm_conv_epi {
  int bias, bn, residual;
  tlm_activation act;
} tlm_conv_epi;

/* Parses a comma list of epilogue items (bias, bn when allow_bn, residual,
 * relu, relu6, gelu, silu) into *e (items not named are left as they
 * are). Returns 0, or -1 after naming the unknown item on stderr. */
int tlm_epilogue_parse(const char *s, tlm_conv_epi *e, int allow_bn);

/* A runnable convolution with owned random buffers. */
typedef struct tlm_conv_problem {
  tlm_op op;
  int n_in;
  tlm_tensor in[6];
  tlm_tensor out;
  float *bufs[7];
} tlm_conv_problem;

/* Builds the tensors of a descriptor in `layout` with weights in
 * `wlayout`. Returns 0, -1 when too large (over 2^31 elements) or out of
 * memory. */
int tlm_conv_problem_make(const tlm_conv_prb *p, tlm_layout layout, tlm_weight_layout wlayout,
                          const tlm_conv_epi *epi, uint64_t seed, tlm_conv_problem *out);
void tlm_conv_problem_free(tlm_conv_problem *p);

/* The op and tensor shapes of tlm_conv_problem_make without buffers (data
 * pointers NULL, bufs empty): for canonical tasks. Returns 0 or -1. */
int tlm_conv_problem_shapes(const tlm_conv_prb *p, tlm_layout layout, tlm_weight_layout wlayout,
                            const tlm_conv_epi *epi, tlm_conv_problem *out);

/* Largest |y - ref| / (sum |x w| + |epilogue terms| + 1e-3) over `points`
 * output elements drawn from `seed` plus every corner-adjacent element
 * (every element when points <= 0); -1 if the problem does not validate. */
double tlm_conv_problem_check(const tlm_conv_problem *p, int points, uint64_t seed);

#endif
