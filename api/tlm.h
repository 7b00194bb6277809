/*
 * tlm.h - the one public header of tlm, a JIT runtime for tensor kernels
 * whose shapes are only known at run time.
 *
 * An application describes an operator (tlm_op) and its tensors (tlm_tensor)
 * and calls tlm_run(). The first call with a new shape builds the operator's
 * schedule space, picks a schedule (the tensor language model when one is
 * configured, otherwise the deterministic default rule), lowers it to a loop
 * nest, JIT-compiles it to native code with LLVM ORC and caches the kernel
 * under an XXH3-128 key. Later calls with the same shape are a hash lookup
 * and a native call. Kernels take M, N, K (and image sizes) at run time, so
 * a new shape often reuses a kernel compiled for a nearby one: the model's
 * decoding keeps such a kernel's decisions unless it ranks another value
 * more than 4 times as probable.
 *
 * Conventions used throughout this header:
 *   - Shapes are written in (rows, cols) notation, outermost first, e.g. A is
 *     (M, K). Strides are counted in ELEMENTS, not bytes.
 *   - Times are in nanoseconds (_ns) or milliseconds (_ms) as the name says;
 *     sizes are in bytes unless the name says elements.
 *   - "Borrowed" means tlm reads the memory only during the call and keeps no
 *     pointer to it afterwards.
 *   - Every fallible function returns tlm_status. TLM_OK is 0. The fixed text
 *     of a status is tlm_status_str(); the detailed message of the last
 *     failure on a runtime is tlm_last_error().
 *   - The library never prints to stdout, never exits and never aborts. It
 *     logs through tlm_config.log_fn at the level tlm_config.verbose.
 *   - Special values, one rule for every operator: a NaN input yields NaN
 *     wherever it takes part (relu and relu6 pass it through; a NaN in a
 *     softmax, layernorm or rmsnorm row makes the row NaN; max pooling
 *     over it is NaN). Infinities follow IEEE arithmetic, except that an
 *     exponential below e^-87 (the smallest normal float) is exactly 0: a
 *     softmax logit of -inf (a masked position) gets probability 0, and
 *     gelu/silu of a large negative input is -0 or 0.
 *
 * The operator semantics follow oneDNN's matmul primitive and the problem
 * descriptors of its benchdnn tool (oneDNN tests/benchdnn/doc/driver_matmul.md).
 */
#ifndef TLM_H
#define TLM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                   */
/* ------------------------------------------------------------------------ */

#define TLM_VERSION_MAJOR 0
#define TLM_VERSION_MINOR 1
#define TLM_VERSION_PATCH 0
/* Single number for comparisons: major * 10000 + minor * 100 + patch. */
#define TLM_VERSION_NUMBER                                                    \
  (TLM_VERSION_MAJOR * 10000 + TLM_VERSION_MINOR * 100 + TLM_VERSION_PATCH)

/* Returns the version string of the linked library, e.g. "0.1.0".
 * The string is static: do not free it. Thread-safe. */
const char *tlm_version(void);

/* Returns TLM_VERSION_NUMBER of the linked library (which may differ from the
 * header the caller was compiled against). Thread-safe. */
int tlm_version_number(void);

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

typedef enum tlm_status {
  TLM_OK = 0,                /* success */
  TLM_ERR_NULL_POINTER = 1,  /* a required pointer argument was NULL */
  TLM_ERR_INVALID_ARGUMENT = 2, /* a value is out of its documented range */
  TLM_ERR_SHAPE_MISMATCH = 3,   /* tensor shapes do not fit the operator */
  TLM_ERR_DTYPE_MISMATCH = 4,   /* a tensor has a data type the op rejects */
  TLM_ERR_OVERFLOW = 5,      /* an element count or byte size overflows */
  TLM_ERR_ALIASING = 6,      /* output strides overlap, or output aliases an
                                input in a way the kernel cannot support */
  TLM_ERR_UNSUPPORTED = 7,   /* valid request that this build cannot serve */
  TLM_ERR_OUT_OF_MEMORY = 8, /* an allocation failed */
  TLM_ERR_JIT = 9,           /* LLVM failed to build or compile a kernel */
  TLM_ERR_IO = 10,           /* a file could not be read or written */
  TLM_ERR_FORMAT = 11,       /* a file's contents failed verification */
  TLM_ERR_THREAD = 12,       /* a thread could not be created */
  TLM_ERR_INTERNAL = 13,     /* a bug in tlm: please report it */
  TLM_ERR_NO_DEVICE = 14,    /* GPU tensors, but no usable CUDA driver or device */
  TLM_STATUS_COUNT_          /* number of codes; not a status */
} tlm_status;

/* Fixed English text of a status code, e.g. "shape mismatch". Never NULL;
 * unknown codes give "unknown status". Static storage. Thread-safe. */
const char *tlm_status_str(tlm_status status);

/* ------------------------------------------------------------------------ */
/* Runtime handle and configuration                                         */
/* ------------------------------------------------------------------------ */

typedef struct tlm_runtime tlm_runtime;

/* Log levels (tlm_config.verbose, environment variable TLM_VERBOSE). */
typedef enum tlm_log_level {
  TLM_LOG_NONE = 0,   /* nothing */
  TLM_LOG_ERROR = 1,  /* failures returned to the caller */
  TLM_LOG_WARN = 2,   /* recoverable problems (bad cache entry, ...) */
  TLM_LOG_INFO = 3,   /* one line per kernel created: shape, schedule, ms */
  TLM_LOG_DEBUG = 4   /* internals: generated IR sizes, pass timings */
} tlm_log_level;

/* Log callback. `message` is a NUL-terminated line without a trailing
 * newline, valid only during the call. May be called from any thread that
 * calls into the runtime, concurrently: the callback must be thread-safe. */
typedef void (*tlm_log_fn)(void *user, tlm_log_level level,
                           const char *message);

typedef struct tlm_config {
  /* Threads that run kernels, the calling thread included. 0 = number of
   * online CPUs. Environment: TLM_NUM_THREADS. Range 0..1024. The
   * language model schedules only a runtime with one thread per CPU (as
   * its training schedules were measured); any other count gets the rule,
   * which blocks for the threads it has. */
  int num_threads;
  /* Directory of the on-disk kernel cache; NULL = $XDG_CACHE_HOME/tlm or
   * ~/.cache/tlm; "none" = no disk cache. It must belong to the user and be
   * closed to group and others, else it is not used (one warning).
   * Size cap: TLM_CACHE_DISK_BYTES (default 256 MiB).
   * Environment: TLM_CACHE_DIR. Copied at tlm_create(). */
  const char *cache_dir;
  /* The int8 tensor language model that schedules new tasks: a model
   * file, or a folder whose *.tlmq files (not hidden) are tried in byte
   * order of their names, the first whose training hardware covers this
   * runtime's target (ISA, FMA width, cores, caches, one thread per core)
   * being used. A model named here must load (every file of a folder),
   * else tlm_create() fails; where none covers the target, the default
   * rule schedules and TLM_VERBOSE >= 1 says why for each. NULL = the
   * model tlm adapt made for this machine, else the shipped folder
   * (installed under share/tlm/models, else the source tree's models/;
   * files there that do not load are skipped with a warning), else the
   * default rule; "none" = always the default rule. Environment:
   * TLM_MODEL. Copied. */
  const char *model_path;
  /* Maximum log level passed to log_fn; default TLM_LOG_NONE (silent).
   * Environment: TLM_VERBOSE (0..4). */
  tlm_log_level verbose;
  /* Log sink; NULL = write lines prefixed "tlm: " to stderr. */
  tlm_log_fn log_fn;
  void *log_user; /* passed to log_fn unchanged */
  /* Most kernels whose JIT code stays in memory; older ones are evicted
   * (CLOCK) and their code freed, and come back from the disk cache when
   * needed. 0 = unlimited. Environment: TLM_CACHE_CAPACITY. */
  size_t cache_capacity;
  /* Most bytes of object code kept in memory (same eviction); 0 =
   * unlimited. Environment: TLM_CACHE_CAPACITY_BYTES. */
  size_t cache_capacity_bytes;
  /* 0 (default): a new shape's schedule follows a kernel this runtime
   * already has for the same operator at other extents unless the model
   * ranks another decision over 4x as probable (fewer compiles; the
   * schedule then depends on the shapes run before). 1: every shape is
   * decoded on its own. No effect with the default rule, whose blocks do
   * not depend on the extents. Part of the disk cache's plan keys.
   * Environment: TLM_KERNEL_REUSE=0 sets it to 1. */
  int disable_kernel_reuse;
  /* 0 (default): a convolution with one group, a 1x1 kernel, no padding,
   * no scale/shift and not both residual and activation runs as the
   * matrix product it is, with the matmul kernels and epilogue: dst
   * (pixels, OC) = src (pixels, IC) x weights for channels-last dst, dst
   * (OC, pixels) = weights x src (IC, pixels) for channels-first dst
   * without bias. So does a KxK convolution with one group and few
   * output pixels M for its reduction K = KD*KH*KW*IC (M <= K/4, e.g.
   * ResNet's 3x3 layers at 7x7 and 14x14), through an im2col copy of at
   * most 64 MiB malloc'd per call: (M, K) x weights (K, OC), channels-last
   * dst, weights one dense (K, OC) matrix (HWIO, or OIHW). And another
   * channels-last convolution with a window, one group, 256 or more
   * output channels in blocks of 64 and HWIO weights declared constant
   * (tlm_constant_add) runs as blocks of 64 output channels over its
   * weights packed per block. 1: always the convolution kernels on the
   * caller's tensors. Environment: TLM_CONV_AS_MATMUL=0 sets it to 1. */
  int disable_conv_as_matmul;
  /* 1 (the default since session 41): when the runtime already holds a
   * kernel of the same
   * operator (same kind, static dims, layout class and epilogue: its code
   * takes the new extents at run time), tlm_run answers at once with it
   * and the shape's own kernel is scheduled and compiled on a background
   * thread, replacing it for that shape when ready (the caller's first
   * call costs no compile; results are correct either way, every kernel
   * passing the same reference checks). A convolution or pooling with no
   * such kernel runs on its family's tier-0 kernel meanwhile (tier0); other shapes
   * with none are compiled before tlm_run returns. The background thread
   * runs under SCHED_IDLE where the process may lift it out again (Linux,
   * root or RLIMIT_NICE >= 10; elsewhere at nice 19 with a 100 us
   * scheduler slice on Linux 6.12+): it compiles in CPU time the
   * application leaves idle and the application's threads preempt it at
   * once. Of the queued shapes it builds first the one whose calls
   * have spent the most time on their provisional kernel. When the
   * application keeps every core busy and no build has finished for a
   * second, tlm_run starts a second thread at nice 10 that builds until
   * none is queued (tlm_stats.bg_rescues); the build the idle thread holds
   * is lifted to nice 10 with it (SCHED_IDLE), or given up at its next
   * compile stage and taken by that thread (nice 19). tlm_destroy stops
   * background compiles at their next stage. Schedules stay deterministic once
   * tlm_wait_background() has returned, but which kernel served a call
   * before that depends on timing (the results agree within the reference
   * tolerance, not bit for bit). A shape whose plan and kernel the disk
   * cache holds is loaded before tlm_run returns (under a millisecond).
   * 0: every new shape is scheduled and compiled before tlm_run returns
   * (bit-identical results call after call; what the tools that time
   * kernels use). Environment: TLM_ASYNC=0 or 1 sets it. */
  int async_compile;
  /* Instruction set the kernels are generated for (tlm_cpu_isa):
   * TLM_CPU_ISA_NATIVE (0, default) = the widest the host runs; a narrower
   * one restricts both the schedule space (vector lanes and registers) and
   * LLVM's target features, so an AVX-512 host builds and runs genuine
   * AVX2 kernels. An ISA the host cannot run makes tlm_create() fail with
   * TLM_ERR_UNSUPPORTED. Part of every cache key. Environment: TLM_ISA =
   * native | avx512 | avx2 | sse | scalar. */
  int isa;
  /* Most bytes of weight matrices tlm keeps packed ahead from memory
   * declared constant (tlm_constant_add); a weight matrix that would not
   * fit is scheduled and run as undeclared memory is. 0 = never pack
   * ahead. Default (tlm_config_init) a quarter of the memory the process
   * may use: physical memory, or its control group's memory limit where
   * that is smaller (a container's limit, not its host's memory); 1 GiB
   * where neither can be read. The copies duplicate weights the caller
   * keeps, so a model whose weights take up to a quarter of that memory
   * runs wholly from packed copies. Environment: TLM_PREPACK_BYTES. */
  size_t prepack_bytes;
  /* LLVM pass pipeline the kernels are optimized with (tlm_passes):
   * TLM_PASSES_FAST (0, default) or LLVM's own O1, O2, O3. The generated
   * loop nests are already tiled, unrolled and vectorized, so "fast" (SROA,
   * early CSE, instcombine, CFG simplification, LICM) reaches the same
   * speed as O1-O3 in less compile time; the others are there to check
   * that. Part of every cache key: a kernel built with one pipeline is
   * never served under another. Environment: TLM_PASSES = fast | O1 | O2
   * | O3. */
  int passes;
  /* Measured top-k (benchmark mode), 0 (default) = off. K > 0: once a new
   * shape runs its own kernel, a background thread compiles up to K
   * candidate schedules (the current one, the model's next best, then
   * neighbours of the current one), checks each against the current
   * kernel's output, times them side by side on private copies of that
   * first call's operands (never the caller's buffers; up to 256 MiB of
   * copies, larger calls are not tuned) only in the application's pauses
   * (5 ms without a tlm_run call) and while no kernel of it runs, and
   * gives the shape the fastest when it is more than 2% faster. A tuning
   * job gives way to any queued background build (it starts again later),
   * so an application that never pauses gets no tuning but still gets
   * each new shape's own kernel. The copies of all tuning jobs waiting or
   * running together stay under 256 MiB: a shape whose copies would pass
   * that is not tuned in this process. The winner is stored in the disk cache as measured, so later
   * processes start from it without tuning again. tlm_destroy cancels a
   * tuning job at its next step. Schedules then depend on timing: keep 0
   * where byte-identical schedules matter. At most TLM_TUNE_MAX (32).
   * Environment: TLM_TUNE. */
  int tune_k;
  /* Ordinal of the CUDA device that GPU tensors (TLM_DEVICE_CUDA) live on;
   * default 0. The driver (libcuda.so.1, opened at run time) is touched
   * only by the first call with GPU tensors. Environment: TLM_CUDA_DEVICE. */
  int cuda_device;
  /* Tier-0 kernels under async_compile: a new shape with no kernel of its
   * operator to answer with runs on its family's tier-0 kernel (plain C
   * built with the library for each ISA, every extent at run time, no
   * compile; slower than a scheduled kernel, checked against the same
   * reference) until its own kernel is ready. 0 (default): convolutions
   * and poolings (one kernel per layer otherwise compiled before its first
   * call); 1: also matmuls (a matmul's first kernel serves later
   * shapes as a sibling, so by default it is compiled before its first
   * call); -1: none, every shape with no sibling is compiled before
   * tlm_run returns. No effect without async_compile. Environment:
   * TLM_TIER0 = -1 | 0 | 1. */
  int tier0;
  /* How long a worker thread, its part of a parallel loop done, keeps
   * spinning for the next one before it sleeps, in microseconds; 0 = the
   * default, TLM_SPIN_US_DEFAULT (1000). A sleeping worker wakes through
   * the kernel (a futex): 5-10 us on bare metal, 30-100 us measured on a
   * 2-vCPU KVM guest, which a kernel of tens of microseconds run right
   * after a pause in the caller's calls then mostly runs without. Longer
   * spins keep the workers' cores busy after the last call (as OpenMP
   * runtimes do by default, for milliseconds); 1 makes them sleep almost
   * at once. While background builds (async_compile) wait for idle CPU
   * time, and when num_threads exceeds the CPUs the process may run on,
   * the workers spin at most 100 us whatever this says. Range 0..1000000.
   * Environment: TLM_SPIN_US. */
  int spin_us;
} tlm_config;

/* tlm_config.spin_us when it is 0: microseconds a worker spins between
 * parallel loops before it sleeps. */
#define TLM_SPIN_US_DEFAULT 1000

/* Largest tlm_config.tune_k. */
#define TLM_TUNE_MAX 32

/* Values of tlm_config.passes. */
typedef enum tlm_passes {
  TLM_PASSES_FAST = 0,
  TLM_PASSES_O1 = 1,
  TLM_PASSES_O2 = 2,
  TLM_PASSES_O3 = 3
} tlm_passes;

/* Values of tlm_config.isa. */
typedef enum tlm_cpu_isa {
  TLM_CPU_ISA_NATIVE = 0, /* the host's widest */
  TLM_CPU_ISA_SCALAR = 1, /* one f32 lane, no SIMD assumed */
  TLM_CPU_ISA_SSE = 2,    /* 128-bit SSE4.1: 4 lanes, 16 registers */
  TLM_CPU_ISA_AVX2 = 3,   /* 256-bit AVX2 + FMA: 8 lanes, 16 registers */
  TLM_CPU_ISA_AVX512 = 4  /* 512-bit AVX-512 F/BW/DQ/VL: 16 lanes, 32 registers */
} tlm_cpu_isa;

/* Fills *config with the defaults, then applies the environment variables
 * named in tlm_config. A malformed variable is ignored (and reported at
 * tlm_create() through the log at TLM_LOG_WARN level).
 * Statuses: TLM_OK, TLM_ERR_NULL_POINTER. Thread-safe (reads getenv). */
tlm_status tlm_config_init(tlm_config *config);

/* Creates a runtime. `config` may be NULL (same as tlm_config_init()).
 * The strings in config are copied; config itself is not kept.
 * On success *out owns a new runtime that the caller frees with
 * tlm_destroy(); on failure *out is set to NULL.
 * Statuses: TLM_OK, TLM_ERR_NULL_POINTER (out is NULL),
 * TLM_ERR_INVALID_ARGUMENT (num_threads, verbose, tune_k, passes, isa,
 * cuda_device, tier0 or spin_us out of range),
 * TLM_ERR_UNSUPPORTED (config.isa wider than the host runs),
 * TLM_ERR_OUT_OF_MEMORY, TLM_ERR_THREAD (worker threads failed to start),
 * TLM_ERR_JIT (LLVM could not set up a JIT for this host), TLM_ERR_IO or
 * TLM_ERR_FORMAT (an explicitly named model cannot be read or fails
 * verification; a damaged shipped model is skipped with a warning).
 * Thread-safe: several runtimes may live in one process.
 * LLVM: the first tlm_create() of the process sets one of LLVM's
 * process-wide code generation options (-disable-lsr: tlm runs loop
 * strength reduction in its own pass pipeline, only on the kernels it
 * speeds up; a third less compile time per matmul kernel). An application
 * that uses LLVM itself and wants LLVM's options untouched sets the
 * environment variable TLM_LLVM_OPTIONS=0 before that call: kernels are
 * then compiled with LLVM's own code generator pipeline, more slowly. */
tlm_status tlm_create(const tlm_config *config, tlm_runtime **out);

/* Frees a runtime, its worker threads and its JIT memory. NULL is a no-op.
 * Must not run concurrently with any other call on the same runtime.
 * Queued background builds are dropped; one in progress is finished first
 * (one compile: tens of milliseconds, 1-2 s measured with every core kept
 * busy by other threads; the idle-priority thread is lifted to nice 10
 * for it). */
void tlm_destroy(tlm_runtime *rt);

/* Detailed message of the last failed call made ON THE CALLING THREAD with
 * this runtime, or "" if there was none. The pointer stays valid until the
 * next call on this thread with this runtime. Thread-safe. NULL rt gives
 * the message of the last failed tlm_create() on this thread. */
const char *tlm_last_error(const tlm_runtime *rt);

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum tlm_dtype {
  TLM_DTYPE_UNDEF = 0,
  TLM_F32 = 1 /* IEEE-754 binary32 */
} tlm_dtype;

/* Most dimensions of a tensor: up to 4 batch dimensions plus 2 matrix ones. */
#define TLM_MAX_DIMS 6

/* A borrowed view of a dense or strided tensor.
 *   shape[i]   extent of dimension i, outermost first, each >= 1.
 *   strides[i] distance in ELEMENTS between consecutive indices of dim i;
 *              >= 0. A stride of 0 broadcasts that dimension (inputs only).
 *   data       first element; must be aligned to the dtype's size. tlm never
 *              frees it or keeps it after the call.
 *   device     where data lives: TLM_DEVICE_CPU (0, host memory) or
 *              TLM_DEVICE_CUDA (a CUdeviceptr of the runtime's CUDA device,
 *              tlm_config.cuda_device, cast to void *; memory from
 *              cuMemAlloc/cudaMalloc or managed memory). Every tensor of
 *              one call lives on the same device. Any other value is
 *              rejected: zero-initialize tensors or fill them with
 *              tlm_tensor_dense().
 * Use tlm_tensor_dense() to fill strides for a row-major layout. */
typedef enum tlm_device { TLM_DEVICE_CPU = 0, TLM_DEVICE_CUDA = 1 } tlm_device;

typedef struct tlm_tensor {
  tlm_dtype dtype;
  int ndim; /* 1..TLM_MAX_DIMS */
  int64_t shape[TLM_MAX_DIMS];
  int64_t strides[TLM_MAX_DIMS];
  void *data;
  int32_t device; /* tlm_device */
  int32_t reserved_; /* 0 */
} tlm_tensor;

/* Describes a dense row-major tensor in host memory (device
 * TLM_DEVICE_CPU; set t->device after the call for GPU memory):
 * strides[ndim-1] = 1, each stride the product of the extents inside it.
 * `shape` is copied (ndim entries).
 * Statuses: TLM_OK, TLM_ERR_NULL_POINTER (t or shape), TLM_ERR_INVALID_ARGUMENT
 * (ndim out of 1..TLM_MAX_DIMS, an extent < 1), TLM_ERR_OVERFLOW (the
 * element count overflows int64). Thread-safe. */
tlm_status tlm_tensor_dense(tlm_tensor *t, tlm_dtype dtype, int ndim,
                            const int64_t *shape, void *data);

/* ------------------------------------------------------------------------ */
/* Operators                                                                 */
/* ------------------------------------------------------------------------ */

typedef enum tlm_op_kind {
  TLM_OP_MATMUL = 1,
  TLM_OP_SOFTMAX = 2,   /* row-wise, see tlm_rownorm_desc */
  TLM_OP_LAYERNORM = 3, /* row-wise */
  TLM_OP_RMSNORM = 4,   /* row-wise */
  TLM_OP_CONV = 5,      /* convolution, see tlm_conv_desc */
  TLM_OP_POOL = 6,      /* pooling, see tlm_pool_desc */
  TLM_OP_ELTWISE = 7,   /* elementwise, see tlm_eltwise_desc */
  TLM_OP_ROPE = 8,      /* rotary position embedding, see tlm_rope_desc */
  TLM_OP_ATTENTION = 9  /* fused scaled dot-product attention, see tlm_attention_desc */
} tlm_op_kind;

/* Elementwise activation applied in an epilogue. */
typedef enum tlm_activation {
  TLM_ACT_NONE = 0,
  TLM_ACT_RELU = 1,      /* max(x, 0) */
  TLM_ACT_GELU_TANH = 2, /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
                            (Hendrycks & Gimpel 2016, the GPT-2 form) */
  TLM_ACT_SILU = 3,      /* x / (1 + exp(-x)) */
  TLM_ACT_RELU6 = 4,     /* min(max(x, 0), 6) (MobileNetV2) */
  TLM_ACT_COUNT_
} tlm_activation;

/* Matmul family: C = epilogue(op(A) x op(B)), computed in f32.
 *
 * Inputs, in this order, to tlm_run():
 *   0  A         (..., M, K), or (..., K, M) stored when transpose_a
 *   1  B         (..., K, N), or (..., N, K) stored when transpose_b
 *   2  bias      (N) or (1, N); present only when has_bias
 *   3  residual  same shape as C (batch dims may broadcast); present only
 *                when has_residual (index 2 if there is no bias)
 * Output 0: C (..., M, N). Must not share memory with any input (C holds
 * partial sums while K is reduced in blocks), with one exception: the
 * residual may be C itself (the same data, dims, extents and strides) when
 * the activation is TLM_ACT_NONE, so C += op(A) x op(B) (+ bias) in place
 * (BLAS's beta = 1); with an activation that is TLM_ERR_ALIASING (the
 * residual comes after it), and on GPU tensors TLM_ERR_UNSUPPORTED.
 *
 * Batch dimensions ("..."): 0 to 4 leading dims. A and B may have fewer
 * batch dims than C (missing leading dims broadcast) or extent 1 where C
 * has more (broadcast), as in benchdnn's "BxMxK:1xKxN". C's batch dims are
 * the broadcast of A's and B's.
 *
 * Epilogue, applied per element of C in this order:
 *   x = acc; if has_bias: x += bias[n]; x = activation(x);
 *   if has_residual: x += residual[..., m, n].
 */
typedef struct tlm_matmul_desc {
  int transpose_a;  /* 0 or 1 */
  int transpose_b;  /* 0 or 1 */
  int has_bias;     /* 0 or 1 */
  tlm_activation activation;
  int has_residual; /* 0 or 1 */
} tlm_matmul_desc;

/* Row-wise operators over the last dimension (C) of x (..., R, C); the
 * leading dims must be collapsible into rows of one stride.
 *
 *   softmax:   y = exp(z - max z) / sum exp(z - max z), z = scale * x
 *              (scale 0 means 1); with causal, row r of each (R, C) matrix
 *              sees columns c <= r + C - R (the last R rows of a causal
 *              attention over C keys, as in prefill and KV-cached decode);
 *              masked columns are written as 0. Inputs: x.
 *   layernorm: y = (x - mean) / sqrt(var + eps) * gamma + beta, mean and
 *              variance of the row computed in two passes (stable for large
 *              offsets). Inputs: x, gamma (C), beta (C).
 *   rmsnorm:   y = x / sqrt(mean(x^2) + eps) * gamma (Zhang & Sennrich
 *              2019, as in LLaMA). Inputs: x, gamma (C).
 * Output 0: y, the shape of x. y may be x itself (same data and strides);
 * otherwise it must not overlap any input. */
typedef struct tlm_rownorm_desc {
  float eps;   /* layernorm/rmsnorm, >= 0 (e.g. 1e-5) */
  float scale; /* softmax logit scale; 0 = 1 */
  int causal;  /* softmax, 0 or 1 */
} tlm_rownorm_desc;

/* Activation and output layouts of a convolution: the order of the dims of
 * src, dst and residual in tlm_tensor.shape (their strides are free, so a
 * channels-last buffer may also be described as NCHW with permuted
 * strides; the generated code adapts to which strides are 1). */
typedef enum tlm_layout {
  TLM_LAYOUT_NCHW = 0, /* (N, C, [D,] [H,] W) */
  TLM_LAYOUT_NHWC = 1  /* (N, [D,] [H,] W, C) */
} tlm_layout;

/* Dim order of convolution weights in tlm_tensor.shape. OC is group-major
 * (output channel oc belongs to group oc / (OC / groups)); ICg = IC / groups. */
typedef enum tlm_weight_layout {
  TLM_WEIGHTS_OIHW = 0, /* (OC, ICg, [KD,] [KH,] KW): PyTorch, oneDNN "oihw" */
  TLM_WEIGHTS_HWIO = 1  /* ([KD,] [KH,] KW, ICg, OC): TensorFlow */
} tlm_weight_layout;

/* Convolution family: 1-D, 2-D or 3-D forward convolution (cross-
 * correlation, as in every deep-learning framework) in f32, with groups
 * (depthwise when groups = IC = OC) and a fused epilogue.
 *
 * Tensors have 2 + S dims, S = 1, 2 or 3 spatial dims (W; H, W; D, H, W);
 * spatial parameters below are indexed (d, h, w) and a 2-D convolution
 * ignores the d entries (1-D also the h entries).
 *
 * Inputs, in this order, to tlm_run():
 *   0  src       (N, IC, ID, IH, IW) in `layout` order
 *   1  weights   (OC, IC/groups, KD, KH, KW) or its HWIO order
 *   2  bias      (OC); only when has_bias
 *   3  scale     (OC) and 4 shift (OC); only when has_scale_shift (a folded
 *                batch normalization: scale = gamma / sqrt(var + eps),
 *                shift = beta - mean * scale)
 *   5  residual  the shape of dst; only when has_residual
 * (absent inputs take no slot: the next present one moves up).
 * Output 0: dst (N, OC, OD, OH, OW) in `layout` order. Its address range
 * (first to last element) must not overlap any input's, even where the
 * elements themselves would not (a channel slice of the same buffer),
 * with one exception: the residual may be dst itself (the same data, dims,
 * extents and strides), which then holds the shortcut on entry and the
 * result on return, as oneDNN's sum post-op; ResNet's blocks write their
 * last convolution over the shortcut this way and keep one buffer less
 * warm (TLM_ERR_ALIASING for any other overlap).
 *
 * Output extents are taken from dst: output position o reads input
 * positions o * stride - pad + k * dilation (k < kernel extent), and
 * positions outside [0, I) read 0; so the right/bottom padding is whatever
 * the output extent implies, as in benchdnn descriptors. With symmetric
 * padding the usual O = (I + 2 pad - dilation (K - 1) - 1) / stride + 1.
 *
 * Epilogue, per element, in this order (ResNet's relu(bn(conv) + x) is
 * has_scale_shift, has_residual, TLM_ACT_RELU):
 *   x = acc; if has_bias: x += bias[oc]; if has_scale_shift: x = x *
 *   scale[oc] + shift[oc]; if has_residual: x += residual[...];
 *   x = activation(x). */
typedef struct tlm_conv_desc {
  tlm_layout layout;
  tlm_weight_layout weight_layout;
  int groups;       /* >= 1, divides IC and OC */
  int stride[3];    /* >= 1 */
  int pad[3];       /* >= 0: zero positions before the first input one */
  int dilation[3];  /* >= 1 (1 = dense; benchdnn's "dh0" is 1) */
  int has_bias;     /* 0 or 1 */
  int has_scale_shift; /* 0 or 1 */
  int has_residual; /* 0 or 1 */
  tlm_activation activation;
} tlm_conv_desc;

/* Pooling over the spatial dims of src (N, C, [D,] [H,] W) in `layout`
 * order (as for convolutions), into dst (N, C, OD, OH, OW).
 *   max: the largest value of the window positions inside the input;
 *   avg: their mean; padding positions are not counted (oneDNN's
 *        pooling_avg_exclude_padding, PyTorch count_include_pad=False).
 * A kernel extent of 0 means the whole input extent along that axis with
 * stride 1 and no padding: global pooling (then dst's extent there is 1).
 * Output extents are taken from dst, as for convolutions; every output
 * window must contain at least one input position. dst must not overlap
 * src. */
typedef enum tlm_pool_alg {
  TLM_POOL_MAX = 0, /* NaN if any position in the window is NaN */
  TLM_POOL_AVG = 1  /* summed in double precision, then rounded once */
} tlm_pool_alg;

typedef struct tlm_pool_desc {
  tlm_layout layout;
  tlm_pool_alg alg;
  int kernel[3]; /* (d, h, w) window, >= 1, or 0 = global along that axis */
  int stride[3]; /* >= 1 */
  int pad[3];    /* >= 0, < kernel */
} tlm_pool_desc;

/* Elementwise: y = act(x), then y = y + z (binary TLM_BINARY_ADD) or
 * y = y * z (TLM_BINARY_MUL). z has x's shape; or broadcasts over all of
 * x's leading dims (one row of the last dim, e.g. a bias: shape (C) or
 * (1, ..., 1, C)); or over the last dim (one value per row: (R, 1) for an
 * x of (R, C), a per-row scale), or both ((1, 1): a scalar). Other partial
 * broadcasts give TLM_ERR_UNSUPPORTED.
 * Inputs: x, and z when binary is not NONE. Output y has x's shape; y may
 * be x itself or z itself (same data, shape and strides), otherwise its
 * address range must not overlap an input's. Gated SiLU (SwiGLU, Shazeer 2020) is act SILU on
 * the gate with binary MUL by the up projection; a residual add is act
 * NONE with binary ADD. */
typedef enum tlm_binary { TLM_BINARY_NONE = 0, TLM_BINARY_ADD = 1, TLM_BINARY_MUL = 2 } tlm_binary;

typedef struct tlm_eltwise_desc {
  tlm_activation activation;
  tlm_binary binary;
} tlm_eltwise_desc;

/* Rotary position embedding (RoPE; Su et al. 2021, as in LLaMA, GPT-NeoX
 * and their descendants) on queries or keys.
 *
 * Inputs, in this order, to tlm_run():
 *   0  x      (..., T, H, D): T tokens of H heads of D features, D even.
 *             Any strides; the dims before T, if any, must collapse with T
 *             into one token axis of one stride (e.g. a (B, T, H, D) batch).
 *   1  table  (T, D): row t holds, for token t's position p,
 *             cos(p * theta_i) for i < D/2, then sin(p * theta_i) for
 *             i < D/2 (theta_i = base^(-2i/D), base 10000 in LLaMA). Any
 *             strides. Positions are the caller's: pass a view of a table
 *             over every position starting at the first token's row (the
 *             KV-cache position of a decode step), so one kernel serves
 *             every position.
 * Output 0: y, x's shape; y may be x itself (same data and strides),
 * otherwise it must not overlap x or the table.
 *
 * Feature pairs (a, b) per head, i < D/2, each rotated by its angle:
 *   TLM_ROPE_NEOX:        a = i, b = i + D/2 (GPT-NeoX; Hugging Face's
 *                         LLaMA "rotate_half")
 *   TLM_ROPE_INTERLEAVED: a = 2i, b = 2i + 1 (Meta's LLaMA, GPT-J)
 *   y_a = x_a cos - x_b sin,  y_b = x_b cos + x_a sin. */
typedef enum tlm_rope_style { TLM_ROPE_NEOX = 0, TLM_ROPE_INTERLEAVED = 1 } tlm_rope_style;

typedef struct tlm_rope_desc {
  tlm_rope_style style;
} tlm_rope_desc;

/* Fused attention: O = softmax(scale * Q K^T [causal mask]) V in one
 * kernel, per head, without writing the scores to memory (online softmax
 * over blocks of keys: Milakov & Gimelshein 2018; FlashAttention, Dao et
 * al. 2022).
 *
 * Inputs, in this order, to tlm_run():
 *   0  Q  (B, Hq, Tq, D)   queries
 *   1  K  (B, Hkv, Tk, D)  keys (a KV cache: any strides, e.g. a view of
 *                          its first Tk positions)
 *   2  V  (B, Hkv, Tk, Dv) values
 * Output 0: O (B, Hq, Tq, Dv). Any strides for all four (a head's rows of
 * a (T, H, D) buffer are dims (1, H, T, D) with strides (0, D, H*D, 1));
 * O must not overlap an input.
 * Hkv divides Hq: query head h reads K/V head h / (Hq / Hkv) (grouped-
 * query attention; Hkv = Hq is multi-head attention, Hkv = 1 multi-query).
 * With causal, query row i (of Tq) sees keys j <= i + Tk - Tq (the last Tq
 * rows of a causal attention over Tk keys: prefill with Tq = Tk, decode
 * with Tq = 1 and the whole cache); causal requires Tq <= Tk.
 * B, Hq, Hkv, Tq, Tk and the strides are run-time arguments of the kernel:
 * one kernel serves every sequence length; D, Dv, causal and which strides
 * are 1 are part of the kernel. */
typedef struct tlm_attention_desc {
  float scale; /* logit scale; 0 = 1 / sqrt(D) */
  int causal;  /* 0 or 1 */
} tlm_attention_desc;

typedef struct tlm_op {
  tlm_op_kind kind;
  union {
    tlm_matmul_desc matmul;   /* kind == TLM_OP_MATMUL */
    tlm_rownorm_desc rownorm; /* softmax, layernorm, rmsnorm */
    tlm_conv_desc conv;       /* kind == TLM_OP_CONV */
    tlm_pool_desc pool;       /* kind == TLM_OP_POOL */
    tlm_eltwise_desc eltwise; /* kind == TLM_OP_ELTWISE */
    tlm_rope_desc rope;       /* kind == TLM_OP_ROPE */
    tlm_attention_desc attention; /* kind == TLM_OP_ATTENTION */
  } u;
} tlm_op;

/* Convenience: a matmul op with no transposes and no epilogue. */
tlm_op tlm_op_matmul(void);

/* Convenience: a row-wise op of `kind` with eps 1e-5, scale 1, no mask. */
tlm_op tlm_op_rownorm(tlm_op_kind kind);

/* Convenience: a convolution in `layout` with OIHW weights, 1 group,
 * stride 1, no padding, no dilation, no epilogue. */
tlm_op tlm_op_conv(tlm_layout layout);

/* Convenience: a pooling op of `alg` in `layout` with a 1x1x1 window,
 * stride 1 and no padding (set kernel/stride/pad after). */
tlm_op tlm_op_pool(tlm_layout layout, tlm_pool_alg alg);

/* Convenience: an elementwise op. */
tlm_op tlm_op_eltwise(tlm_activation activation, tlm_binary binary);

/* Convenience: a rotary position embedding with feature pairs of `style`. */
tlm_op tlm_op_rope(tlm_rope_style style);

/* Convenience: a fused attention with scale 1 / sqrt(D), causal or not. */
tlm_op tlm_op_attention(int causal);

/* ------------------------------------------------------------------------ */
/* Running                                                                   */
/* ------------------------------------------------------------------------ */

/* Runs `op` on `inputs` and writes `outputs`.
 *
 * The first call for a given task (operator, shapes, strides, dtypes,
 * epilogue, and whether the weights lie in memory declared constant with
 * tlm_constant_add) schedules and JIT-compiles a kernel, which takes
 * milliseconds; later calls with the same task reuse it from the in-memory
 * cache.
 * Work is split over the runtime's threads; the call returns when the
 * outputs are complete.
 *
 *   rt        runtime; must not be NULL.
 *   op        operator description; borrowed.
 *   inputs    array of n_inputs tensors (see the op's documentation for the
 *             order); borrowed.
 *   outputs   array of n_outputs tensors; their data is written; borrowed.
 *
 * Statuses: TLM_OK; TLM_ERR_NULL_POINTER (rt, op, inputs, outputs, or a
 * tensor's data); TLM_ERR_INVALID_ARGUMENT (unknown op kind or activation,
 * flag not 0/1, wrong tensor count, ndim out of range, extent < 1,
 * negative stride, misaligned data); TLM_ERR_DTYPE_MISMATCH (a tensor not
 * f32); TLM_ERR_SHAPE_MISMATCH (inner dims disagree, batch dims not
 * broadcastable, bias or residual of the wrong shape, output shape wrong);
 * TLM_ERR_OVERFLOW (an element count or byte offset overflows int64);
 * TLM_ERR_ALIASING (output with a zero stride or overlapping itself, or
 * sharing memory with an input other than in the in-place forms each
 * operator's description allows: a row operator's y = x, a convolution's
 * residual = dst, a matmul's residual = C without an activation);
 * TLM_ERR_UNSUPPORTED (a valid request
 * this build cannot serve: an eltwise z broadcast other than those listed
 * for tlm_eltwise_desc, row-op leading dims that do not collapse into rows
 * of one stride, a convolution with more than 2^24 channels or a kernel
 * extent over 4096); TLM_ERR_OUT_OF_MEMORY; TLM_ERR_JIT (LLVM failed to
 * build the kernel); TLM_ERR_INTERNAL (a schedule that does not lower to a
 * loop nest: a bug in tlm, please report it).
 * On failure the outputs may have been left untouched or partly written
 * only for TLM_ERR_JIT/TLM_ERR_OUT_OF_MEMORY (never for validation errors),
 * and tlm_last_error() holds the details; an output that is also an input
 * (in place) may then have lost its input values too.
 *
 * Tensors in GPU memory (every tensor's device TLM_DEVICE_CUDA) run on
 * the GPU and this call returns once the default stream has finished them:
 * see tlm_run_on_stream() for what runs there and its further statuses
 * (TLM_ERR_NO_DEVICE among them). Tensors of mixed devices, or a device
 * value that is neither, give TLM_ERR_INVALID_ARGUMENT.
 *
 * Thread-safety: calls on one runtime may come from several threads at
 * once. Concurrent calls share the worker threads, so they serialize at
 * kernel execution; scheduling and compiling of different tasks may
 * overlap. */
tlm_status tlm_run(tlm_runtime *rt, const tlm_op *op, const tlm_tensor *inputs,
                   int n_inputs, const tlm_tensor *outputs, int n_outputs);

/* tlm_run for tensors in GPU memory, launched on the application's stream.
 *
 * With every tensor's device TLM_DEVICE_CUDA, the kernel is enqueued on
 * `cuda_stream` (a CUstream / cudaStream_t of the runtime's device's
 * primary context; NULL = the legacy default stream) and the call returns
 * once it is enqueued: the outputs are complete when the stream says so.
 * tlm_run() with GPU tensors is this call on the default stream followed
 * by a synchronization of that stream. The first call of a shape builds
 * its kernel (GPU space, rule, LLVM NVPTX to PTX, loaded by the driver)
 * before enqueuing; later calls look it up (XXH3 keys with the device's
 * compute capability, limits, name and the driver's version; the PTX is
 * kept in the disk cache). Operators on GPU: matmul (every option of
 * tlm_matmul_desc, with a residual apart from C: in place it returns
 * TLM_ERR_UNSUPPORTED), softmax, layernorm, rmsnorm; others return
 * TLM_ERR_UNSUPPORTED. With host tensors this is tlm_run() and the stream
 * must be NULL.
 *
 * Statuses: those of tlm_run(); TLM_ERR_NO_DEVICE (no CUDA driver, no
 * device of that ordinal, or the driver failed to start: the message says
 * which; asked again on every call costs nothing, the answer is kept);
 * TLM_ERR_INVALID_ARGUMENT also for tensors of mixed devices, a device
 * value other than TLM_DEVICE_CPU/TLM_DEVICE_CUDA or a non-zero
 * reserved_, a GPU tensor whose first or last element the driver does not
 * know as memory of this device or as managed memory, a stream with host
 * tensors; TLM_ERR_UNSUPPORTED also for an operator without GPU kernels
 * and for a grid past CUDA's limits (more than 65535 batches, or more
 * than 65535 column tiles); TLM_ERR_JIT when PTX could not be generated or
 * the driver rejected it (the driver's log is in the message);
 * TLM_ERR_INTERNAL when the launch or the synchronization failed (a bad
 * stream, or an error an earlier kernel left on the context). Missing
 * pointers and tensor counts out of range get tlm_run()'s statuses, and
 * every validation error is reported before the driver is touched.
 * Thread-safe as tlm_run(); launches from several threads on one stream
 * are ordered as the calls are. */
tlm_status tlm_run_on_stream(tlm_runtime *rt, const tlm_op *op, const tlm_tensor *inputs,
                             int n_inputs, const tlm_tensor *outputs, int n_outputs,
                             void *cuda_stream);

/* ------------------------------------------------------------------------ */
/* Constant weights                                                          */
/* ------------------------------------------------------------------------ */

/* Declares the bytes [data, data + bytes) constant: the caller promises not
 * to change them until tlm_constant_remove(rt, data) has returned. A
 * matmul whose B (input 1), or a channels-last convolution run as a matmul
 * (TLM_CONV_AS_MATMUL) whose weights, lie wholly inside such a range may
 * then be served from a copy of B packed once in the kernel's panel layout
 * (the weight reorder that oneDNN and inference engines do ahead of time),
 * made on first use and kept until removal; the kernel skips its per-call
 * copy of B. A channels-last convolution with a window, HWIO weights in
 * such a range and 256 or more output channels in blocks of 64 (unless
 * it runs as a matmul over its im2col copy; not with
 * TLM_CONV_AS_MATMUL=0) runs in blocks of 64 output channels over a copy
 * of its weights packed per block, made and kept the same way. Any other
 * convolution whose weights lie in such a range but start off a 64-byte
 * boundary (malloc() gives 16) reads a copy of them at one, in the same
 * layout: the same kernel, bit for bit the same results, without the
 * split vector loads (ResNet-50's 3x3 layers ran up to 1.45x slower from
 * misaligned weights on an AMD Zen 3); undeclared weights off a boundary
 * are copied onto one for each call of 256 or more output pixels. Such a matmul or blocked task is scheduled on its own (its schedule packs B),
 * so results agree with undeclared B up to float rounding, not bit for
 * bit. Writing the bytes while declared is not detected: later runs may
 * use the old values. At most tlm_config.prepack_bytes of copies are kept;
 * a B that would not fit is treated as undeclared.
 *   data    first byte; not NULL. Nothing is read until a run uses it.
 *   bytes   >= 1; data + bytes must not wrap around.
 * Statuses: TLM_OK; TLM_ERR_NULL_POINTER (rt or data);
 * TLM_ERR_INVALID_ARGUMENT (bytes 0, a wrapping range, or one that
 * overlaps a range already declared); TLM_ERR_OUT_OF_MEMORY.
 * Thread-safe; waits for kernels running at the time. */
tlm_status tlm_constant_add(tlm_runtime *rt, const void *data, size_t bytes);

/* Ends the declaration made by tlm_constant_add(rt, data, ...) and frees
 * the packed copies read from that range. Call it before the memory is
 * written or freed. Statuses: TLM_OK; TLM_ERR_NULL_POINTER (rt or data);
 * TLM_ERR_INVALID_ARGUMENT (no declared range starts at data).
 * Thread-safe; waits for kernels running at the time, so no later run
 * reads the copies. tlm_destroy() frees whatever is still declared. */
tlm_status tlm_constant_remove(tlm_runtime *rt, const void *data);

/* ------------------------------------------------------------------------ */
/* Statistics                                                                */
/* ------------------------------------------------------------------------ */

typedef struct tlm_stats {
  /* every successful run counts once in cache_hits, cache_misses or
   * cache_waits, so their sum is runs (up to runs in flight); failed runs
   * count in none of them. */
  uint64_t runs;             /* successful tlm_run() calls */
  uint64_t cache_hits;       /* runs served by an existing plan and kernel */
  uint64_t cache_misses;     /* runs that planned a new shape or rebuilt an evicted kernel */
  uint64_t schedules;        /* schedules chosen (rule + language model) */
  uint64_t decodes;          /* of which decoded by the language model */
  uint64_t compiles;         /* kernels JIT-compiled */
  uint64_t compile_fail;     /* compiles that failed */
  uint64_t evictions;        /* kernels whose JIT code was freed */
  uint64_t disk_plan_hits;   /* schedules read from the disk cache */
  uint64_t disk_kernel_hits; /* kernels loaded from the disk cache */
  uint64_t kernels_resident; /* kernels with JIT code in memory now */
  uint64_t code_bytes_resident; /* their object code, bytes */
  double schedule_ms;        /* total wall time choosing schedules */
  double compile_ms;         /* total wall time JIT-compiling */
  double disk_load_ms;       /* total wall time loading kernels from the disk cache (read,
                                verify, link); a warm start's cost */
  uint64_t provisional;      /* new shapes answered at once by another shape's kernel
                                or a tier-0 kernel (tlm_config.async_compile) */
  uint64_t upgrades;         /* of which given their own kernel by the background thread */
  /* compile_ms by phase: building the LLVM IR from the loop nest, the
   * optimization passes (with the target machine's creation), object
   * emission (instruction selection, register allocation, encoding), and
   * linking the object into the JIT; the rest is lowering and the disk
   * cache's store */
  double compile_ir_ms, compile_opt_ms, compile_emit_ms, compile_link_ms;
  uint64_t cache_waits;      /* runs that waited while another thread planned their shape */
  uint64_t prepacks;         /* weight matrices packed ahead from constant memory */
  uint64_t prepacked_bytes;  /* bytes of those copies kept now */
  uint64_t tunes;            /* shapes measured by tlm_config.tune_k's background thread */
  uint64_t tune_improved;    /* of which given a faster kernel than their first */
  double tune_ms;            /* total wall time of that thread's tuning */
  uint64_t bg_rescues;       /* times the background builds made no progress for a second
                                while every core was busy, so a rescue thread at nice 10
                                took them over until none was queued (tlm_config.async_compile) */
} tlm_stats;

/* Blocks until the background thread (tlm_config.async_compile) has no
 * shape left to schedule and compile: afterwards every shape run so far
 * runs its own kernel. With tuning on (tlm_config.tune_k) it also waits
 * for the queued tuning jobs, but only while no other thread calls
 * tlm_run: tuning runs in the application's pauses, so beside a thread
 * that goes on calling it returns once the builds are done. Returns at
 * once when there is nothing to wait for. Statuses: TLM_OK,
 * TLM_ERR_NULL_POINTER. Thread-safe; tlm_run may go on meanwhile (shapes
 * it adds are waited for too). */
tlm_status tlm_wait_background(tlm_runtime *rt);

/* Copies the runtime's counters into *out. Counters only grow.
 * Statuses: TLM_OK, TLM_ERR_NULL_POINTER. Thread-safe (the counters are
 * read individually, so a concurrent run may be half-counted). */
tlm_status tlm_get_stats(const tlm_runtime *rt, tlm_stats *out);

/* Writes a one-line description of the machine the runtime generates code
 * for into buf (NUL-terminated, truncated to cap bytes): the ISA kernels
 * use and the host's widest, vector lanes and registers, the FMA datapath,
 * cores, per-core caches, the CPU's name, and whether a model schedules
 * ("model" or "rule"), e.g. "avx2 8 lanes, 16 regs, FMA 2x256 lat 4 (8
 * chains), 2 cores, L1 32K L2 512K L3 32768K; host avx2; AMD EPYC 7763
 * (family 25 model 1); schedules: rule". Statuses: TLM_OK,
 * TLM_ERR_NULL_POINTER (rt or buf), TLM_ERR_INVALID_ARGUMENT (cap 0).
 * Thread-safe. */
tlm_status tlm_describe_target(const tlm_runtime *rt, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* TLM_H */
