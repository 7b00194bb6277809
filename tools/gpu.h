/* gpu.h - `tlm gpu`: GPU schedules and PTX from the command line (tools). */
#ifndef TLM_TOOLS_GPU_H
#define TLM_TOOLS_GPU_H

/* argv after "gpu":
 *   ptx DESC [--sm N] [--schedule TEXT] [--bias] [--residual] [--act A] [--ta] [--tb]
 *       the schedule (the rule's unless given) and its PTX on stdout;
 *   export [--sm N] [--random R] [--seed S] --out DIR ([--group G] FILE|DESC)...
 *       for each matmul of benchdnn FILEs or DESCs: the rule's kernel and R
 *       random ones as DIR/kNNNN.ptx, and DIR/manifest.json describing
 *       each launch (tensors, epilogue, grid, block, the GA_* argument
 *       list with the operands' slots marked) for tests/device/gpu_check.py;
 *       --group G names the shapes of the items after it (the manifest's
 *       "groups", for per-group summaries);
 *   info
 *       the CUDA device the runtime sees (TLM_CUDA_DEVICE), or why none.
 * Returns the exit status: 0, 1 (a failure), 2 (usage). */
int tlm_cmd_gpu(int argc, char **argv);

#endif
