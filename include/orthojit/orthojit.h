/*
 * orthojit C API: the hybrid Muon + AdamW optimizer and batched orthogonalization, callable from C
 * (C99) and anything with a C FFI. Only C types cross this boundary: opaque handles, plain
 * structs, enums, pointers to caller-owned memory and NUL-terminated UTF-8 strings.
 *
 * Errors. Every function that can fail returns an oj_status. On failure, oj_last_error() returns
 * a message that says what was wrong and what is valid (for example the preset names); the
 * message is per thread and stays until the next failure on that thread (a success does not
 * clear it). No C++ exception ever escapes a function of this header. Out-parameters are written
 * only on success. Passing NULL where a pointer is required, or a value outside an enum, returns
 * OJ_INVALID_ARGUMENT.
 *
 * ABI. The library is liborthojit_c.so.MAJOR (soname), installed with orthojit.pc and the CMake
 * target orthojit::c (cmake --install; find_package(orthojit)). It exports the oj_* functions and
 * nothing else. Within one major version: functions, enum values and option keys are only added,
 * never removed or changed in meaning; the structs the caller allocates (oj_step_report) keep
 * their size and layout; handles stay opaque.
 * A new major version changes the soname, so a program never loads an incompatible library. The
 * version in use: oj_version().
 *
 * Threads. One handle must not be used by two threads at once. Handles share the runtime's
 * compiled kernels (through locked caches); running distinct handles on distinct threads at the
 * same time is not yet covered by a test.
 *
 * Typical use:
 *
 *   oj_optimizer* opt;
 *   if (oj_optimizer_create("deepspeed", &opt) != OJ_OK) { fprintf(stderr, "%s\n", oj_last_error()); ... }
 *   oj_optimizer_set_option(opt, "muon.lr", "0.02");
 *   int64_t shape[2] = {64, 32};
 *   oj_optimizer_add_parameter(opt, "layer1.weight", 2, shape, OJ_DTYPE_F32, w, OJ_DTYPE_F32, gw, OJ_TAG_AUTO);
 *   ...
 *   for (step...) { compute gradients into gw...; oj_optimizer_step(opt, &report); }
 *   (CUDA memory: oj_optimizer_set_option(opt, "memory", "cuda") first, device pointers for w and
 *   gw, and oj_optimizer_step_on_stream(opt, stream, &report); see "Device memory" below)
 *   oj_optimizer_destroy(opt);
 *
 * The optimizer's formulas, presets and settings are those of the C++ runtime
 * (runtime/muon/hybrid_optimizer.h and runtime/muon/optimizer_settings.h):
 *
 *   Muon:  g → momentum M (ema: M ← M + (1−β)(g − M); sum: M ← β·M + g)
 *          → U (Nesterov: ema g + β(M − g), sum g + β·M; else M) → O = NS(U) per matrix block
 *          → p ← p·(1 − lr·wd) − lr·s·O, s the lr adjustment of the block's shape
 *            (original: sqrt(max(1, rows/cols)))
 *   AdamW: t ← t+1; m ← m + (1−β1)(g − m); v ← v + (1−β2)(g² − v);
 *          standard:  p ← p·(1 − lr·wd) − lr · (m/bc1) / (√(v/bc2) + eps)
 *          moonlight: p ← p·(1 − lr·wd) − (lr·√bc2/bc1) · m / (√v + eps)
 */
#ifndef ORTHOJIT_ORTHOJIT_H
#define ORTHOJIT_ORTHOJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this C API; oj_api_version() returns the one the library was built with. It
 * changes whenever a declaration of this header changes incompatibly. */
#define OJ_API_VERSION 1

/* ------------------------------------------------------------------------------------------- */
/* Status codes and errors                                                                      */

typedef enum oj_status {
  OJ_OK = 0,
  OJ_INVALID_ARGUMENT = 1, /* bad input: NULL pointer, bad enum, unknown preset/setting/program/
                              parameter name, bad shape or tag, inconsistent split, bad value */
  OJ_UNAVAILABLE = 2,      /* a backend this build or machine cannot run (e.g. "cuda" without a
                              driver); oj_available_backends() lists the ones it can */
  OJ_IO_ERROR = 3,         /* a file could not be read or written, or is not a valid state file */
  OJ_INVALID_STATE = 4,    /* the call is not allowed now (e.g. adding a parameter after build) */
  OJ_OUT_OF_MEMORY = 5,
  OJ_INTERNAL = 6          /* a bug in orthojit: please report the oj_last_error() message */
} oj_status;

/* The message of the last failure on the calling thread; "" when nothing has failed on it. The
 * pointer stays valid until the next call of this API on the same thread. Never NULL. */
const char* oj_last_error(void);

/* A constant name for a status ("OJ_OK", "OJ_INVALID_ARGUMENT", ...; "OJ_UNKNOWN_STATUS"). */
const char* oj_status_name(oj_status status);

/* ------------------------------------------------------------------------------------------- */
/* Version and capabilities                                                                     */

/* The library's version, "MAJOR.MINOR.PATCH" (static storage). */
const char* oj_version(void);
/* The OJ_API_VERSION the library was compiled with. */
int oj_api_version(void);
/* The backends this build can run on this machine, comma-separated ("ref,cpu" or
 * "ref,cpu,cuda"; static storage). */
const char* oj_available_backends(void);

/* ------------------------------------------------------------------------------------------- */
/* Element types, tags and layouts                                                              */

typedef enum oj_dtype {
  OJ_DTYPE_F32 = 0,  /* IEEE binary32 */
  OJ_DTYPE_BF16 = 1, /* bfloat16 (the upper 16 bits of a binary32), as uint16_t */
  OJ_DTYPE_F16 = 2   /* IEEE binary16, as uint16_t */
} oj_dtype;

/* Which group optimizes a parameter. */
typedef enum oj_tag {
  OJ_TAG_AUTO = 0,   /* the rule: Muon iff ndim >= 2 and the lower-cased name contains neither
                        "embed" nor "lm_head"; else AdamW */
  OJ_TAG_MUON = 1,   /* Muon (ndim must be >= 2) */
  OJ_TAG_ADAMW = 2,  /* AdamW */
  OJ_TAG_FROZEN = 3  /* not optimized at all (requires_grad = false); no state */
} oj_tag;

/* How a Muon tensor of 3 or more dimensions becomes matrices. */
typedef enum oj_layout {
  OJ_LAYOUT_AUTO = 0,     /* the "tensor_layout" option (the preset's: trailing for deepspeed and
                             keller, flatten for moonlight and torch) */
  OJ_LAYOUT_FLATTEN = 1,  /* (d0, d1·d2·…): one matrix */
  OJ_LAYOUT_BATCH = 2,    /* d0 matrices of (d1, d2·…) (experts), orthogonalized in one batch */
  OJ_LAYOUT_TRAILING = 3  /* DeepSpeed's and Keller Jordan's: a 4-D filter as (d0, d1·d2·d3), any
                             other tensor as a batch of its trailing (d[-2], d[-1]) matrices */
} oj_layout;

/* ------------------------------------------------------------------------------------------- */
/* The hybrid Muon + AdamW optimizer                                                            */

typedef struct oj_optimizer oj_optimizer; /* opaque */

/* Creates an optimizer with the settings of a preset: "deepspeed", "keller", "moonlight" or
 * "torch" (the runtime's list, runtime/muon/presets.h; tests/muon_presets_test.cpp checks that
 * this one equals it; an unknown name: OJ_INVALID_ARGUMENT, the message lists the presets). The
 * handle starts in the collecting phase: options and parameters may be added until it is built. */
oj_status oj_optimizer_create(const char* preset, oj_optimizer** out);

/* Creates an optimizer from the optimizer section of a DeepSpeed JSON config file
 * ({"optimizer": {"type": "muon", "params": {"lr": ..., "momentum": ..., ...}}}, read as
 * runtime/muon/deepspeed_config.h documents; the other sections are validated, not used here).
 * OJ_IO_ERROR when the file cannot be read; OJ_INVALID_ARGUMENT, naming the JSON path, when it
 * is not a valid config. */
oj_status oj_optimizer_create_from_deepspeed_config(const char* path, oj_optimizer** out);

/* Frees the handle and its state (never the trainer's data or gradients). NULL is a no-op. */
void oj_optimizer_destroy(oj_optimizer* optimizer);

/* Sets one option by key and value, both strings, e.g. ("muon.lr", "0.02"),
 * ("muon.backend", "cpu"), ("adam.formula", "moonlight"). Keys: muon.lr, muon.momentum,
 * muon.nesterov, muon.weight_decay, muon.momentum_kind, muon.lr_adjust, muon.program,
 * muon.strategy, muon.precision, muon.ns_steps, muon.ns_eps, muon.norm_clamp, muon.backend,
 * muon.threads, adam.lr, adam.beta1, adam.beta2, adam.eps, adam.weight_decay, adam.formula,
 * tensor_layout (flatten | batch | trailing), conv_scale (kernel | matrix), missing_grad
 * (skip | zero: what a step does with a parameter whose gradient is NULL), tagging
 * (deepspeed | moonlight), experts_as_batch, memory (host | cuda: where data, gradients and state
 * live; see "Device memory" below). Numbers are decimal. An unknown key or bad value:
 * OJ_INVALID_ARGUMENT naming what is valid, and every setting stays as it was.
 * After the optimizer is built only "muon.lr" and "adam.lr" may change (OJ_INVALID_STATE for the
 * others); oj_optimizer_set_learning_rates does the same. */
oj_status oj_optimizer_set_option(oj_optimizer* optimizer, const char* key, const char* value);

/* The current settings, one "key = value" per line, each a key oj_optimizer_set_option takes
 * (a value in parentheses is left to the program or variant; "  # ..." explains a value). The
 * string is owned by the handle and valid until the next call on it. */
oj_status oj_optimizer_describe(oj_optimizer* optimizer, const char** out);

/* Adds a parameter (collecting phase only; OJ_INVALID_STATE after build). The optimizer keeps
 * the pointers and never copies or frees the memory behind them (device pointers under
 * memory = cuda, see "Device memory" below):
 *   name        unique, non-empty (e.g. "layers.0.mlp.up_proj.weight")
 *   ndim, shape ndim >= 1 dimensions, each > 0; row-major
 *   dtype, data the parameter's element type and values, updated in place by each step
 *   grad_dtype, grad  the gradient, same shape; grad may be NULL (no gradient: under
 *               missing_grad = skip, the moonlight and torch presets, the parameter is left alone
 *               by a step; under missing_grad = zero, deepspeed and keller, it takes the full
 *               step with a zero gradient)
 *   tag         OJ_TAG_AUTO (the rule), OJ_TAG_MUON, OJ_TAG_ADAMW or OJ_TAG_FROZEN.
 * A Muon-tagged parameter with ndim < 2 is OJ_INVALID_ARGUMENT. */
oj_status oj_optimizer_add_parameter(oj_optimizer* optimizer, const char* name, int32_t ndim, const int64_t* shape,
                                     oj_dtype dtype, void* data, oj_dtype grad_dtype, const void* grad, oj_tag tag);

/* How Muon cuts an added parameter into matrices (collecting phase only):
 *   layout          OJ_LAYOUT_AUTO / FLATTEN / BATCH (tensors of 3 or more dimensions)
 *   row_splits      n_row_splits consecutive row blocks summing to the matrix's rows (QKV of a
 *                   fused projection), each orthogonalized on its own; n_row_splits 0 (and
 *                   row_splits may be NULL): no split
 *   head_rows       per-head split: each row block cut into blocks of head_rows rows; 0: none.
 * The consistency with the shape is checked when the optimizer is built. */
oj_status oj_optimizer_set_parameter_split(oj_optimizer* optimizer, const char* name, oj_layout layout, int32_t n_row_splits,
                                           const int64_t* row_splits, int64_t head_rows);

/* Ends the collecting phase: tags and validates every parameter and allocates the state (zeros).
 * Called by the first oj_optimizer_step (or any call that needs the built optimizer) when the
 * trainer has not called it. On failure the handle stays in the collecting phase, so the problem
 * may be fixed (e.g. with oj_optimizer_set_parameter_split or an option) and the build retried.
 * OJ_INVALID_ARGUMENT names the offending parameter; OJ_UNAVAILABLE: muon.backend cannot run
 * here. Building a built optimizer is a no-op. */
oj_status oj_optimizer_build(oj_optimizer* optimizer);

/* Re-points a parameter's gradient (grad may be NULL: no gradient for the next steps) or data,
 * before or after build. Unknown name: OJ_INVALID_ARGUMENT. */
oj_status oj_optimizer_set_gradient(oj_optimizer* optimizer, const char* name, const void* grad, oj_dtype grad_dtype);
oj_status oj_optimizer_set_data(oj_optimizer* optimizer, const char* name, void* data);

/* What one step did. */
typedef struct oj_step_report {
  int32_t skipped;           /* 1: a gradient held a NaN or an infinity; nothing changed (no
                                parameter, no state); oj_optimizer_skip_reason says which */
  int32_t muon_updated;      /* parameters updated by Muon */
  int32_t adam_updated;      /* parameters updated by AdamW */
  int32_t without_gradient;  /* parameters without a gradient (skipped, or stepped with zeros) */
  double orthogonalize_seconds;
  int64_t steps_taken;       /* steps taken so far, this one included (skipped ones excluded) */
} oj_step_report;

/* One optimizer step over every parameter with a gradient (builds first if needed). A skipped
 * step is not an error: it returns OJ_OK with report->skipped = 1. report may be NULL. A step
 * that fails (a kernel the backend cannot compile for a parameter's shape) fails before any
 * parameter or state changes, so it can be retried.
 * An optimizer with memory = cuda: OJ_INVALID_STATE (use oj_optimizer_step_on_stream). */
oj_status oj_optimizer_step(oj_optimizer* optimizer, oj_step_report* report);

/* Device memory. With oj_optimizer_set_option(opt, "memory", "cuda") before build, every data and
 * grad pointer given to the optimizer (oj_optimizer_add_parameter, oj_optimizer_set_data,
 * oj_optimizer_set_gradient) is a CUdeviceptr value (cudaMalloc, a framework's tensor) of device
 * 0's primary context, the one the CUDA runtime and PyTorch use; the optimizer allocates its
 * state (momentum, exp_avg, exp_avg_sq; f32) in device memory there, zeroed, and frees it on
 * destroy. Setting memory = cuda in a build without the CUDA backend or on a machine without a
 * usable driver and device: OJ_UNAVAILABLE, saying why (the setting is unchanged). muon.backend
 * is not used: every Muon step runs on the cuda backend. At build and in oj_optimizer_set_data /
 * oj_optimizer_set_gradient, a pointer the driver does not know (host memory the CUDA runtime
 * never allocated or registered) is OJ_INVALID_ARGUMENT naming the parameter.
 *
 * oj_optimizer_step_on_stream enqueues one step on `stream` (a CUstream / cudaStream_t; NULL: the
 * legacy default stream): the Muon parameters as compiled Muon steps (momentum, Newton–Schulz and
 * the update in the generated kernels; equal blocks of all parameters batched; replayed as one
 * CUDA graph per set of shapes), the AdamW parameters with a generated kernel. It never
 * synchronizes the device. Its one wait is the non-finite check: a small generated kernel per
 * gradient sets one device flag, which is copied back on `stream`, and `stream` is synchronized
 * once (a step with a NaN or an infinity in any gradient changes nothing, so this is known before
 * anything is enqueued). When the flag is set, the gradients are copied to the host to name the
 * first bad element in oj_optimizer_skip_reason. Everything else of the step is asynchronous:
 * the parameters and state are updated when `stream` reaches that point, so the trainer orders
 * later work on the same stream (or synchronizes). The first step of a new set of shapes
 * compiles (NVRTC, cached on disk). report->orthogonalize_seconds is 0 (nothing is timed).
 * Results match oj_optimizer_step on the same values up to the Newton–Schulz kernels' rounding:
 * the element-wise arithmetic is the host's, bit for bit.
 *
 * oj_optimizer_save_state, oj_optimizer_load_state and oj_optimizer_qk_clip on such an optimizer
 * synchronize the device (cuCtxSynchronize) and copy through host memory; the state file is the
 * same as a host optimizer's (either loads the other's). An optimizer with memory = host (the
 * default): oj_optimizer_step_on_stream is OJ_INVALID_STATE (use oj_optimizer_step). */
oj_status oj_optimizer_step_on_stream(oj_optimizer* optimizer, void* stream, oj_step_report* report);

/* Why the last step was skipped ("" when it was not, or before the first step). Owned by the
 * handle, valid until the next step or destroy. NULL handle: "". */
const char* oj_optimizer_skip_reason(const oj_optimizer* optimizer);

/* The group learning rates (for schedulers; the lr adjustments apply on top). Both >= 0 and
 * finite. Allowed before and after build. */
oj_status oj_optimizer_set_learning_rates(oj_optimizer* optimizer, double muon_lr, double adam_lr);

/* Optimizer state held, in bytes, per group (f32 buffers: Muon 4 per element, the momentum;
 * AdamW 8 per element, the two moments). Either pointer may be NULL. Builds first if needed. */
oj_status oj_optimizer_state_bytes(oj_optimizer* optimizer, int64_t* muon_bytes, int64_t* adam_bytes);

/* Steps taken so far. */
oj_status oj_optimizer_steps_taken(oj_optimizer* optimizer, int64_t* out);

/* What the optimizer decided for each parameter (builds first if needed). */
typedef struct oj_parameter_info {
  const char* name;     /* owned by the handle; valid until destroy */
  int32_t uses_muon;    /* 1: Muon; 0: AdamW or frozen */
  int32_t optimized;    /* 0: frozen (OJ_TAG_FROZEN) */
  int64_t state_bytes;
  /* Muon only: `batch` matrices of rows x cols, each cut into `blocks` row blocks. */
  int64_t batch, rows, cols, blocks;
} oj_parameter_info;

oj_status oj_optimizer_parameter_count(oj_optimizer* optimizer, int64_t* out);
oj_status oj_optimizer_parameter_info(oj_optimizer* optimizer, int64_t index, oj_parameter_info* out);

/* QK-clip (MuonClip, Kimi K2), after a step: for each of the n_heads heads h,
 * γ = min(1, tau / s_max[h]), and head h's rows (head_rows each) of the parameters q_name and
 * k_name are scaled by √γ. */
oj_status oj_optimizer_qk_clip(oj_optimizer* optimizer, const char* q_name, const char* k_name, int64_t head_rows,
                               const double* s_max, int64_t n_heads, double tau);

/* The optimizer state (momentum buffers, AdamW moments and step counts, the steps taken; not
 * the parameters, which the trainer owns) to a safetensors file, written atomically, and back.
 * Loading checks every tensor against this optimizer's parameters (names, shapes, types, tags)
 * before changing anything: a file that cannot be read, is not an orthojit optimizer state or
 * does not match is OJ_IO_ERROR, and nothing changes. Both build first if needed. */
oj_status oj_optimizer_save_state(oj_optimizer* optimizer, const char* path);
oj_status oj_optimizer_load_state(oj_optimizer* optimizer, const char* path);

/* Progress of those two, which take minutes on a large model (a 70B model's state is ~290 GB to
 * write, hash and flush): `progress` is called on the calling thread before and after each piece
 * with the phase ("write", "read", "checksum" or "sync"; docs/muon.md) and the bytes done of
 * the total ("sync": 0 of 1, then 1 of 1), and `user_data`. It returns 0 to go on, anything else
 * to stop: the call then returns OJ_IO_ERROR saying so, a save leaves the file at its path as it
 * was, a load stopped before its "read" phase changes nothing (on CUDA memory a load stopped
 * while reading leaves the state partly loaded: OJ_INVALID_STATE until a load succeeds). A
 * distributed optimizer calls it on rank 0 for a save, and on every rank for its own reads
 * (rank 0 also for the checksum); a stop on any rank fails the call on every rank. NULL: none
 * (the default). Kept for every later save and load of this handle. */
typedef int (*oj_progress_fn)(const char* phase, uint64_t done, uint64_t total, void* user_data);
oj_status oj_optimizer_set_progress(oj_optimizer* optimizer, oj_progress_fn progress, void* user_data);

/* ------------------------------------------------------------------------------------------- */
/* ZeRO data parallelism (docs/distributed.md)                                                   */

/* Makes the optimizer a distributed one (collecting phase only; OJ_INVALID_STATE after build or
 * when it already has a communicator): every rank creates its handle with the same options and
 * the same parameters in the same order, and calls this with its communicator; oj_optimizer_build
 * (or the first call that builds) is then collective, and so are the steps, the state files,
 * QK-clip and the calls below. Each rank's gradients are reduced (averaged over the ranks unless
 * zero.average_gradients = false), the optimizer state is partitioned over the ranks, and every
 * rank's parameters are equal after each step (at stage 3 after oj_optimizer_gather_parameters).
 * The results are the single-rank optimizer's on the reduced gradients (bit for bit where the
 * reduction is exact). The state file is the single-rank optimizer's, byte for byte: rank 0
 * writes it as the ranks stream their partitions to it in chunks, and each rank reads only its
 * own part, so no rank ever holds the whole state. Options, by oj_optimizer_set_option before build (defaults in brackets):
 *   zero.stage 1 | 2 | 3 [2]       1: the state is partitioned; 2: the reduced gradients too (each
 *                                  rank holds its partition of them and a bucket, never the whole
 *                                  model's); 3: the parameters too, gathered on request
 *   zero.mode deepspeed | balanced [deepspeed]  who orthogonalizes a matrix: each rank owning a
 *                                  piece of it (DeepSpeed's), or each matrix once (load-balanced)
 *   zero.average_gradients [true]  zero.gradients_reduced [false]: the gradients are already
 *                                  reduced and equal on every rank (taken as they are)
 *   zero.offload_optimizer [false] state in host memory, Newton-Schulz on the host
 *   zero.alignment [1]             elements; every tensor starts at a multiple of it
 *   zero.bucket_elements [16777216] f32 elements of the bucket of the reduce-scatter and
 *                                  all-gather at stages 2-3 (DeepSpeed's reduce_bucket_size)
 *   zero.max_gradient_norm [0]     > 0: the reduced gradient's global norm is clipped to it
 * A handle created from a DeepSpeed config takes these from its zero_optimization section
 * (stage, offload_optimizer, reduce_bucket_size when given) and gradient_clipping when the section asks for
 * stage 1, 2 or 3 (NVMe offload there: a warning on stderr and the defaults; stage 0 or no
 * section: the defaults).
 *
 * oj_optimizer_distribute_mpi: `mpi_comm` points to the trainer's MPI_Comm (&comm; this header
 * does not include mpi.h). The communicator is duplicated (MPI_Comm_dup: collective), so the
 * optimizer's traffic never mixes with the trainer's. Host memory only (memory = cuda needs
 * NCCL). OJ_UNAVAILABLE in a build without MPI.
 * oj_optimizer_distribute_nccl: `nccl_comm` is the trainer's ncclComm_t, which it keeps owning
 * (and must keep alive until destroy); `rank` and `world` are its rank and size. Host buffers
 * are staged through the device. OJ_UNAVAILABLE without the NCCL engine or libnccl. */
oj_status oj_optimizer_distribute_mpi(oj_optimizer* optimizer, const void* mpi_comm);
oj_status oj_optimizer_distribute_nccl(oj_optimizer* optimizer, void* nccl_comm, int32_t rank, int32_t world);

/* Distributed only (OJ_INVALID_STATE otherwise). Accumulate: adds the current gradients as one
 * micro-batch; the next step applies the update once, to their sum, and does not read the
 * gradients again. At stages 2-3 each micro-batch is reduce-scattered here. Gather: at stage 3,
 * every rank's parameters receive the other ranks' slices (after a step, before the next forward).
 * `stream`: a CUstream with memory = cuda (NULL: the legacy default stream); ignored on the host. */
oj_status oj_optimizer_accumulate_gradients(oj_optimizer* optimizer, void* stream);
oj_status oj_optimizer_gather_parameters(oj_optimizer* optimizer, void* stream);

/* What this rank holds and sent (distributed only; builds first if needed). */
typedef struct oj_distributed_info {
  int32_t rank, world;
  int64_t partition_begin, partition_end; /* its partition of the flat buffer of every parameter */
  int64_t padded_elements;                /* that buffer's length */
  int64_t memory_bytes;                   /* allocated by the optimizer: state and step buffers */
  int64_t bytes_sent_last_step;           /* by this rank, for the last step and its micro-batches */
} oj_distributed_info;
oj_status oj_optimizer_distributed_info(oj_optimizer* optimizer, oj_distributed_info* out);

/* ------------------------------------------------------------------------------------------- */
/* Orthogonalization                                                                            */

/* Orthogonalizes `batch` row-major rows x cols f32 matrices from `input` into `output` (which
 * may be the same buffer):
 *   program   a shipped program ("jordan_ns5", "polar_express5", "gram_polar_express5", ...) or a
 *             path to a .oj file
 *   backend   "ref" (the float64 reference interpreter, emulating the program's storage rounding),
 *             "cpu", "cuda", or "auto" (ref for a program that stores f64, else cpu); NULL: "ref"
 *   strategy  "auto", "standard" or "gram"; NULL: "auto"
 * A NaN or an infinity in `input`: OJ_INVALID_ARGUMENT naming the element (output untouched).
 * A backend that cannot run here: OJ_UNAVAILABLE. */
oj_status oj_orthogonalize(const char* program, const char* backend, const char* strategy, int64_t batch, int64_t rows, int64_t cols,
                           const float* input, float* output);

/* The same on device memory with the cuda backend: `input` and `output` are device pointers
 * (CUdeviceptr values, e.g. from cudaMalloc or a framework's tensors) on device 0's primary
 * context, the one the CUDA runtime and PyTorch use; the launches are enqueued on `stream` (a
 * CUstream / cudaStream_t; NULL: the legacy default stream) and not synchronized: the caller
 * synchronizes or orders later work on the same stream. The first call for a shape compiles
 * (NVRTC, cached on disk). Without a usable CUDA driver or device: OJ_UNAVAILABLE, saying why.
 * `output` may equal `input` only if the program's kernels never read the input after writing
 * the output; pass distinct buffers. */
oj_status oj_orthogonalize_device(const char* program, const char* strategy, int64_t batch, int64_t rows, int64_t cols, const void* input,
                                  void* output, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ORTHOJIT_ORTHOJIT_H */
