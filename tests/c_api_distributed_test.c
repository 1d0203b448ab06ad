/* The C API's distributed optimizer (oj_optimizer_distribute_mpi and the calls after it), from C99
 * under mpirun with 1 to 4 processes. Its contract is the single-rank optimizer's on the reduced
 * gradients, so each rank also runs a single-rank handle as the reference, given the reduced
 * gradient: every rank gives its own gradients, multiples of 2^-10 small enough that every sum of
 * them is exact in f32 in any order, so the reduction (and the sum of micro-batches) is exactly
 * the reference's; averaged over the ranks in balanced mode (one f32 division, as the reference's),
 * summed in deepspeed mode. After every step each rank's parameters must equal the reference's
 * bit for bit, for every stage and mode, with buckets of one element, of ten (a short last round)
 * and the default, micro-batches with a parameter gather between them, a changed learning rate,
 * QK-clip (every rank its own S_max; the reference clips with the largest) and a state file
 * written by the distributed handle and loaded by a new single-rank one. Then the errors. Prints each failed check; exits 1 when any failed (on any
 * rank). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "orthojit/orthojit.h"
#include "tests/c_check.h"

static int g_rank = 0, g_world = 1;

/* The model: two matrices that partition boundaries cut, a bias, a batch of two expert matrices,
 * and the W_q / W_k pair of QK-clip (2 heads of 3 rows). */
#define TENSORS 6
static const char* k_names[TENSORS] = {"embed_like.weight", "mlp.weight", "mlp.bias", "moe.experts", "attn.q", "attn.k"};
static const int32_t k_ndims[TENSORS] = {2, 2, 1, 3, 2, 2};
static const int64_t k_shapes[TENSORS][3] = {{9, 13}, {11, 7}, {11, 0}, {2, 5, 6}, {6, 8}, {6, 8}};

static size_t elements(int t) {
  size_t count = 1;
  int d;
  for (d = 0; d < k_ndims[t]; ++d) count *= (size_t)k_shapes[t][d];
  return count;
}

typedef struct Model {
  float* data[TENSORS];
  float* grad[TENSORS];
} Model;

static void model_init(Model* model, uint64_t seed) {
  int t;
  size_t i;
  g_rng = seed;
  for (t = 0; t < TENSORS; ++t) {
    model->data[t] = malloc(elements(t) * sizeof(float));
    model->grad[t] = calloc(elements(t), sizeof(float));
    for (i = 0; i < elements(t); ++i) model->data[t][i] = uniform();
  }
}

static void model_free(Model* model) {
  int t;
  for (t = 0; t < TENSORS; ++t) {
    free(model->data[t]);
    free(model->grad[t]);
  }
}

static void model_copy(Model* to, const Model* from) {
  int t;
  for (t = 0; t < TENSORS; ++t) memcpy(to->data[t], from->data[t], elements(t) * sizeof(float));
}

static oj_optimizer* create(Model* model, int distributed, int stage, const char* mode, const char* bucket, int average) {
  oj_optimizer* opt = NULL;
  char text[16];
  int t;
  CHECK_OK(oj_optimizer_create("keller", &opt));
  if (!opt) return NULL;
  CHECK_OK(oj_optimizer_set_option(opt, "muon.backend", "ref"));
  CHECK_OK(oj_optimizer_set_option(opt, "muon.precision", "f32"));
  CHECK_OK(oj_optimizer_set_option(opt, "adam.weight_decay", "0.01"));
  for (t = 0; t < TENSORS; ++t)
    CHECK_OK(oj_optimizer_add_parameter(opt, k_names[t], k_ndims[t], k_shapes[t], OJ_DTYPE_F32, model->data[t], OJ_DTYPE_F32, model->grad[t],
                                        t == 0 ? OJ_TAG_MUON : OJ_TAG_AUTO));
  CHECK_OK(oj_optimizer_set_parameter_split(opt, "moe.experts", OJ_LAYOUT_BATCH, 0, NULL, 0));
  if (distributed) {
    MPI_Comm comm = MPI_COMM_WORLD;
    snprintf(text, sizeof text, "%d", stage);
    CHECK_OK(oj_optimizer_set_option(opt, "zero.stage", text));
    CHECK_OK(oj_optimizer_set_option(opt, "zero.mode", mode));
    CHECK_OK(oj_optimizer_set_option(opt, "zero.average_gradients", average ? "true" : "false"));
    CHECK_OK(oj_optimizer_set_option(opt, "zero.bucket_elements", bucket));
    CHECK_OK(oj_optimizer_distribute_mpi(opt, &comm));
  }
  return opt;
}

/* Every rank draws every rank's gradient for this micro-batch (one shared sequence), k·2^-10 with
 * |k| <= 64, and gives its own; the reference accumulates their sum itself (exact). */
static void draw_gradients(Model* distributed, Model* sum, int first_micro_batch) {
  int t, r;
  size_t i;
  for (t = 0; t < TENSORS; ++t)
    for (i = 0; i < elements(t); ++i) {
      float total = 0.0f;
      for (r = 0; r < g_world; ++r) {
        const float value = (float)(int)(64.0f * uniform()) / 1024.0f;
        if (r == g_rank) distributed->grad[t][i] = value;
        total += value;
      }
      sum->grad[t][i] = first_micro_batch ? 0.0f + total : sum->grad[t][i] + total;
    }
}

/* The mean over the ranks, as the distributed optimizer forms it: the exact sum divided once. */
static void average_over_ranks(Model* sum) {
  int t;
  size_t i;
  for (t = 0; t < TENSORS; ++t)
    for (i = 0; i < elements(t); ++i) sum->grad[t][i] = sum->grad[t][i] / (float)g_world;
}

static int same_parameters(const Model* a, const Model* b, const char* where) {
  int t, same = 1;
  for (t = 0; t < TENSORS; ++t)
    if (memcmp(a->data[t], b->data[t], elements(t) * sizeof(float)) != 0) {
      fprintf(stderr, "rank %d of %d: %s differs from the single-rank optimizer's (%s)\n", g_rank, g_world, k_names[t], where);
      same = 0;
    }
  return same;
}

static void test_steps_match_the_single_rank_optimizer(int stage, const char* mode, const char* bucket, int average, const char* state_path) {
  Model distributed, single, resumed;
  oj_optimizer *opt, *reference, *loaded;
  oj_step_report report;
  oj_distributed_info info;
  double s_max[2];
  char where[96];
  int step, micro;
  const uint64_t seed = 77 + (uint64_t)stage;
  model_init(&distributed, seed);
  model_init(&single, seed);
  model_init(&resumed, seed);
  opt = create(&distributed, 1, stage, mode, bucket, average);
  reference = create(&single, 0, 0, NULL, NULL, 0);
  g_rng = seed * 31;
  for (step = 0; step < 4; ++step) {
    const int micro_batches = step == 2 ? 3 : 1;
    snprintf(where, sizeof where, "stage %d, %s mode, bucket %s, after step %d", stage, mode, bucket, step);
    if (step == 1) {
      CHECK_OK(oj_optimizer_set_learning_rates(opt, 0.05, 0.002));
      CHECK_OK(oj_optimizer_set_learning_rates(reference, 0.05, 0.002));
    }
    for (micro = 0; micro < micro_batches; ++micro) {
      draw_gradients(&distributed, &single, micro == 0);
      if (micro_batches == 1) continue;
      CHECK_OK(oj_optimizer_accumulate_gradients(opt, NULL));
      /* A trainer may gather before each forward: the accumulated micro-batches must survive it. */
      CHECK_OK(oj_optimizer_gather_parameters(opt, NULL));
    }
    if (average) average_over_ranks(&single);
    CHECK_OK(oj_optimizer_step(opt, &report));
    CHECK(!report.skipped && report.steps_taken == step + 1);
    if (stage == 3) CHECK_OK(oj_optimizer_gather_parameters(opt, NULL));
    CHECK_OK(oj_optimizer_step(reference, NULL));
    CHECK(same_parameters(&distributed, &single, where));
  }
  /* QK-clip: this rank's S_max; every rank clips with each head's largest over the ranks. */
  s_max[0] = 50.0 + 10.0 * g_rank;
  s_max[1] = 200.0 - 10.0 * g_rank;
  CHECK_OK(oj_optimizer_qk_clip(opt, "attn.q", "attn.k", 3, s_max, 2, 40.0));
  s_max[0] = 50.0 + 10.0 * (g_world - 1);
  s_max[1] = 200.0;
  CHECK_OK(oj_optimizer_qk_clip(reference, "attn.q", "attn.k", 3, s_max, 2, 40.0));
  CHECK(same_parameters(&distributed, &single, "after QK-clip"));
  /* The state file of the distributed handle (rank 0 writes it; collective) continues in a new
   * single-rank handle as in the reference. */
  CHECK_OK(oj_optimizer_save_state(opt, state_path));
  model_copy(&resumed, &single);
  loaded = create(&resumed, 0, 0, NULL, NULL, 0);
  CHECK_OK(oj_optimizer_set_learning_rates(loaded, 0.05, 0.002));
  CHECK_OK(oj_optimizer_load_state(loaded, state_path));
  draw_gradients(&distributed, &single, 1);
  if (average) average_over_ranks(&single);
  {
    int t;
    for (t = 0; t < TENSORS; ++t) memcpy(resumed.grad[t], single.grad[t], elements(t) * sizeof(float));
  }
  CHECK_OK(oj_optimizer_step(reference, NULL));
  CHECK_OK(oj_optimizer_step(loaded, NULL));
  CHECK(same_parameters(&resumed, &single, "a single-rank optimizer resumed from the distributed state file"));
  CHECK_OK(oj_optimizer_step(opt, NULL));
  if (stage == 3) CHECK_OK(oj_optimizer_gather_parameters(opt, NULL));
  CHECK(same_parameters(&distributed, &single, "the step after the state file"));
  /* What this rank holds. */
  CHECK_OK(oj_optimizer_distributed_info(opt, &info));
  CHECK(info.rank == g_rank && info.world == g_world);
  CHECK(info.partition_end - info.partition_begin == info.padded_elements / g_world && info.partition_begin == g_rank * (info.padded_elements / g_world));
  /* The gradient reduction alone sends (world - 1) x the partition's f32 per rank (stage 1 twice that). */
  CHECK(info.memory_bytes > 0 && info.bytes_sent_last_step >= (int64_t)(g_world - 1) * (info.partition_end - info.partition_begin) * 4);
  oj_optimizer_destroy(loaded);
  oj_optimizer_destroy(reference);
  oj_optimizer_destroy(opt);
  model_free(&distributed);
  model_free(&single);
  model_free(&resumed);
}

static void test_errors(void) {
  Model model;
  oj_optimizer *opt, *single;
  MPI_Comm comm = MPI_COMM_WORLD;
  const char* text = NULL;
  oj_distributed_info info;
  model_init(&model, 5);
  opt = create(&model, 0, 0, NULL, NULL, 0);
  CHECK_FAILS(oj_optimizer_set_option(opt, "zero.stage", "4"), OJ_INVALID_ARGUMENT, "zero.stage must be an integer in 1..3");
  CHECK_FAILS(oj_optimizer_set_option(opt, "zero.mode", "fastest"), OJ_INVALID_ARGUMENT, "deepspeed or balanced");
  CHECK_FAILS(oj_optimizer_set_option(opt, "zero.bucket_elements", "0"), OJ_INVALID_ARGUMENT, "zero.bucket_elements must be a whole number >= 1");
  CHECK_FAILS(oj_optimizer_set_option(opt, "zero.max_gradient_norm", "-1"), OJ_INVALID_ARGUMENT, "must be >= 0");
  CHECK_FAILS(oj_optimizer_set_option(opt, "zero.stages", "2"), OJ_INVALID_ARGUMENT, "zero.stage, zero.mode");
  CHECK_FAILS(oj_optimizer_set_option(opt, "zero.average_gradients", "maybe"), OJ_INVALID_ARGUMENT, "true or false");
  CHECK_FAILS(oj_optimizer_distribute_mpi(opt, NULL), OJ_INVALID_ARGUMENT, "mpi_comm");
  CHECK_FAILS(oj_optimizer_distribute_nccl(opt, &comm, 2, 2), OJ_INVALID_ARGUMENT, "0 <= rank < world");
  CHECK_OK(oj_optimizer_set_option(opt, "zero.stage", "3"));
  CHECK_OK(oj_optimizer_distribute_mpi(opt, &comm));
  CHECK_FAILS(oj_optimizer_distribute_mpi(opt, &comm), OJ_INVALID_STATE, "already distributed");
  CHECK_OK(oj_optimizer_describe(opt, &text));
  CHECK(text && strstr(text, "zero.stage = 3\n") && strstr(text, "communicator = MPI"));
  CHECK_OK(oj_optimizer_build(opt));
  CHECK_FAILS(oj_optimizer_set_option(opt, "zero.stage", "2"), OJ_INVALID_STATE, "before the optimizer is built");
  /* A single-rank handle has neither micro-batches nor a gather, nor distributed info; a built
   * one cannot become distributed. */
  single = create(&model, 0, 0, NULL, NULL, 0);
  CHECK_FAILS(oj_optimizer_accumulate_gradients(single, NULL), OJ_INVALID_STATE, "distributed optimizer");
  CHECK_FAILS(oj_optimizer_gather_parameters(single, NULL), OJ_INVALID_STATE, "stage 3");
  CHECK_FAILS(oj_optimizer_distributed_info(single, &info), OJ_INVALID_STATE, "not distributed");
  CHECK_FAILS(oj_optimizer_distribute_mpi(single, &comm), OJ_INVALID_STATE, "before the optimizer is built");
  oj_optimizer_destroy(single);
  oj_optimizer_destroy(opt);
  model_free(&model);
}

int main(int argc, char** argv) {
  static const char* modes[2] = {"deepspeed", "balanced"};
  static const char* buckets[3] = {"1", "10", "16777216"};
  char state_path[256];
  int stage, mode, failures = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world);
  /* Every rank names the file rank 0 writes (the ranks share this host's file system). */
  {
    long pid = (long)getpid();
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    snprintf(state_path, sizeof state_path, "c_api_distributed_test_%ld.safetensors", pid);
  }
  for (stage = 1; stage <= 3; ++stage)
    for (mode = 0; mode < 2; ++mode)
      test_steps_match_the_single_rank_optimizer(stage, modes[mode], buckets[(stage + mode) % 3], /* average: */ mode == 1, state_path);
  test_errors();
  if (g_rank == 0) remove(state_path);
  MPI_Allreduce(&g_failures, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_failures) fprintf(stderr, "c_api_distributed_test: rank %d of %d: %d of %d checks failed\n", g_rank, g_world, g_failures, g_checks);
  else if (g_rank == 0 && failures == 0) printf("c_api_distributed_test: all %d checks passed on each of %d ranks\n", g_checks, g_world);
  MPI_Finalize();
  return failures ? 1 : 0;
}
