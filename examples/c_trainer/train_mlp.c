/* A trainer written in C99 against the orthojit C API (include/orthojit/orthojit.h).
 *
 * It trains a small MLP classifier, 32 -> 64 -> 64 -> 10 with tanh and softmax cross-entropy,
 * on synthetic data (Gaussian inputs labelled by a fixed random "teacher" network), twice from
 * the same initialization and with the same mini-batches:
 *   hybrid: the two hidden weight matrices on Muon, the biases and the output layer on AdamW
 *           (the rule tags the hidden matrices; the output layer is tagged OJ_TAG_ADAMW);
 *   adamw:  every parameter on AdamW (OJ_TAG_ADAMW).
 * Both use the same preset and the same AdamW settings, and a linear learning-rate decay set
 * through oj_optimizer_set_learning_rates. It prints both loss curves (the loss on the whole
 * training set) side by side, and the held-out accuracy. Exit status: 0, or 1 when an API call
 * fails or the hybrid run's final loss is not below its initial loss.
 *
 * train_mlp_mpi is the same program built with ORTHOJIT_EXAMPLE_MPI, data parallel under mpirun:
 * every rank computes the gradient of its share of each mini-batch (samples rank, rank + world,
 * ...; each a part of the batch mean, so the optimizer sums them: zero.average_gradients = false),
 * and the optimizer is distributed over MPI_COMM_WORLD with ZeRO (oj_optimizer_distribute_mpi;
 * --zero-stage, 2 by default; stage 3 gathers the parameters after each step). It trains the same
 * model as one process, up to the order of the f32 sums; rank 0 prints.
 *
 *   train_mlp [--steps N (600)] [--every N (50)] [--backend cpu|ref|cuda (cpu)] [--preset NAME (keller)]
 *             [--muon-lr X (0.02)] [--adam-lr X (0.01)]
 *   mpirun -np R train_mlp_mpi [the same options] [--zero-stage 1|2|3 (2)]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "orthojit/orthojit.h"
#ifdef ORTHOJIT_EXAMPLE_MPI
#include <mpi.h>
#endif

/* This process's rank and the number of ranks (1 and 0 without MPI); only rank 0 prints. */
static int g_rank = 0, g_world = 1;
#define say(...) ((void)(g_rank == 0 && printf(__VA_ARGS__)))

enum { D_IN = 32, D_H = 64, D_OUT = 10, N_TRAIN = 8192, N_TEST = 512, BATCH = 128, TEACHER_H = 32 };

/* ------------------------------------------------------------------------------------------- */
/* Deterministic random numbers (xorshift64*, Box–Muller). */

static uint64_t g_state = 88172645463325252u;

static double uniform01(void) {
  g_state ^= g_state >> 12;
  g_state ^= g_state << 25;
  g_state ^= g_state >> 27;
  return (double)((g_state * 2685821657736338717u) >> 11) / 9007199254740992.0;
}

static float gaussian(void) {
  double u1 = uniform01(), u2 = uniform01();
  if (u1 < 1e-300) u1 = 1e-300;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* ------------------------------------------------------------------------------------------- */
/* The model: parameters and their gradients, each a separate array the optimizer points at. */

typedef struct mlp {
  float w1[D_H * D_IN], b1[D_H];
  float w2[D_H * D_H], b2[D_H];
  float w3[D_OUT * D_H], b3[D_OUT];
} mlp;

typedef struct activations {
  float h1[BATCH][D_H], h2[BATCH][D_H], p[BATCH][D_OUT];
} activations;

static void init_mlp(mlp* m) {
  int i;
  const float s1 = 1.0f / sqrtf((float)D_IN), s2 = 1.0f / sqrtf((float)D_H);
  for (i = 0; i < D_H * D_IN; ++i) m->w1[i] = s1 * gaussian();
  for (i = 0; i < D_H * D_H; ++i) m->w2[i] = s2 * gaussian();
  for (i = 0; i < D_OUT * D_H; ++i) m->w3[i] = s2 * gaussian();
  memset(m->b1, 0, sizeof m->b1);
  memset(m->b2, 0, sizeof m->b2);
  memset(m->b3, 0, sizeof m->b3);
}

/* y = W x + b, W rows x cols row-major. */
static void affine(const float* w, const float* b, const float* x, float* y, int rows, int cols) {
  int r, c;
  for (r = 0; r < rows; ++r) {
    float sum = b[r];
    for (c = 0; c < cols; ++c) sum += w[r * cols + c] * x[c];
    y[r] = sum;
  }
}

/* Forward pass of one sample; returns -log p[label] and leaves the activations in h1, h2, p. */
static float forward(const mlp* m, const float* x, int label, float* h1, float* h2, float* p) {
  float z[D_OUT], max_z, total = 0;
  int i;
  affine(m->w1, m->b1, x, h1, D_H, D_IN);
  for (i = 0; i < D_H; ++i) h1[i] = tanhf(h1[i]);
  affine(m->w2, m->b2, h1, h2, D_H, D_H);
  for (i = 0; i < D_H; ++i) h2[i] = tanhf(h2[i]);
  affine(m->w3, m->b3, h2, z, D_OUT, D_H);
  max_z = z[0];
  for (i = 1; i < D_OUT; ++i)
    if (z[i] > max_z) max_z = z[i];
  for (i = 0; i < D_OUT; ++i) {
    p[i] = expf(z[i] - max_z);
    total += p[i];
  }
  for (i = 0; i < D_OUT; ++i) p[i] /= total;
  return -logf(p[label] > 1e-30f ? p[label] : 1e-30f);
}

/* Mean loss and accuracy over a data set. */
static void evaluate(const mlp* m, const float* x, const int* y, int n, double* loss, double* accuracy) {
  float h1[D_H], h2[D_H], p[D_OUT];
  double total = 0;
  int i, k, correct = 0;
  for (i = 0; i < n; ++i) {
    int best = 0;
    total += (double)forward(m, x + i * D_IN, y[i], h1, h2, p);
    for (k = 1; k < D_OUT; ++k)
      if (p[k] > p[best]) best = k;
    correct += best == y[i];
  }
  *loss = total / n;
  *accuracy = (double)correct / n;
}

/* Gradients of the mean cross-entropy over one mini-batch (indices `batch`) into g: this rank's
 * share of it (its samples' terms of the mean), the whole of it on one process. */
static void backward(const mlp* m, mlp* g, const float* x, const int* y, const int* batch, activations* a) {
  float dz[D_OUT], dh2[D_H], dh1[D_H];
  int s, r, c;
  const float scale = 1.0f / (float)BATCH;
  memset(g, 0, sizeof *g);
  for (s = g_rank; s < BATCH; s += g_world) {
    const float* xs = x + batch[s] * D_IN;
    float* h1 = a->h1[s];
    float* h2 = a->h2[s];
    float* p = a->p[s];
    forward(m, xs, y[batch[s]], h1, h2, p);
    for (r = 0; r < D_OUT; ++r) dz[r] = (p[r] - (r == y[batch[s]] ? 1.0f : 0.0f)) * scale;
    /* output layer */
    for (r = 0; r < D_OUT; ++r) {
      g->b3[r] += dz[r];
      for (c = 0; c < D_H; ++c) g->w3[r * D_H + c] += dz[r] * h2[c];
    }
    for (c = 0; c < D_H; ++c) {
      float sum = 0;
      for (r = 0; r < D_OUT; ++r) sum += m->w3[r * D_H + c] * dz[r];
      dh2[c] = sum * (1.0f - h2[c] * h2[c]);
    }
    /* second hidden layer */
    for (r = 0; r < D_H; ++r) {
      g->b2[r] += dh2[r];
      for (c = 0; c < D_H; ++c) g->w2[r * D_H + c] += dh2[r] * h1[c];
    }
    for (c = 0; c < D_H; ++c) {
      float sum = 0;
      for (r = 0; r < D_H; ++r) sum += m->w2[r * D_H + c] * dh2[r];
      dh1[c] = sum * (1.0f - h1[c] * h1[c]);
    }
    /* first hidden layer */
    for (r = 0; r < D_H; ++r) {
      g->b1[r] += dh1[r];
      for (c = 0; c < D_IN; ++c) g->w1[r * D_IN + c] += dh1[r] * xs[c];
    }
  }
}

/* ------------------------------------------------------------------------------------------- */
/* Data: Gaussian inputs, labels from a random tanh teacher 32 -> 32 -> 10. */

static void make_data(float* x, int* y, int n, const float* tw1, const float* tw2) {
  int i, r, c;
  for (i = 0; i < n; ++i) {
    float h[TEACHER_H], best_value = -1e30f;
    int best = 0;
    for (c = 0; c < D_IN; ++c) x[i * D_IN + c] = gaussian();
    for (r = 0; r < TEACHER_H; ++r) {
      float sum = 0;
      for (c = 0; c < D_IN; ++c) sum += tw1[r * D_IN + c] * x[i * D_IN + c];
      h[r] = tanhf(sum);
    }
    for (r = 0; r < D_OUT; ++r) {
      float sum = 0;
      for (c = 0; c < TEACHER_H; ++c) sum += tw2[r * TEACHER_H + c] * h[c];
      if (sum > best_value) {
        best_value = sum;
        best = r;
      }
    }
    y[i] = best;
  }
}

/* ------------------------------------------------------------------------------------------- */

typedef struct options {
  int steps, every;
  const char* backend;
  const char* preset;
  const char* muon_lr;
  const char* adam_lr;
  const char* zero_stage;
} options;

#define TRY(call)                                                                                             \
  do {                                                                                                        \
    oj_status status_ = (call);                                                                               \
    if (status_ != OJ_OK) {                                                                                   \
      fprintf(stderr, "train_mlp: %s failed: %s: %s\n", #call, oj_status_name(status_), oj_last_error());     \
      if (opt) oj_optimizer_destroy(opt);                                                                     \
      return 1;                                                                                               \
    }                                                                                                         \
  } while (0)

/* Trains `m` for o->steps steps; losses[k] is the training-set loss after k·every steps. */
static int train(const options* o, int hybrid, mlp* m, const float* x, const int* y, const int* order, double* losses, double* test_loss,
                 double* test_accuracy, const float* x_test, const int* y_test, int64_t* state_bytes) {
  static mlp g;
  static activations a;
  oj_optimizer* opt = NULL;
  const oj_tag hidden = hybrid ? OJ_TAG_AUTO : OJ_TAG_ADAMW; /* AUTO: the rule picks Muon for a hidden matrix */
  int64_t s_w1[2] = {D_H, D_IN}, s_w2[2] = {D_H, D_H}, s_w3[2] = {D_OUT, D_H}, s_b1[1] = {D_H}, s_b3[1] = {D_OUT};
  int64_t muon_bytes = 0, adam_bytes = 0, count = 0, i;
  double muon_lr = atof(o->muon_lr), adam_lr = atof(o->adam_lr), accuracy, loss;
  int step, point = 0;

  TRY(oj_optimizer_create(o->preset, &opt));
  TRY(oj_optimizer_set_option(opt, "muon.backend", o->backend));
  TRY(oj_optimizer_set_option(opt, "muon.lr", o->muon_lr));
  TRY(oj_optimizer_set_option(opt, "adam.lr", o->adam_lr));
  TRY(oj_optimizer_set_option(opt, "adam.weight_decay", "0"));
  TRY(oj_optimizer_set_option(opt, "muon.weight_decay", "0"));
  TRY(oj_optimizer_add_parameter(opt, "mlp.hidden1.weight", 2, s_w1, OJ_DTYPE_F32, m->w1, OJ_DTYPE_F32, g.w1, hidden));
  TRY(oj_optimizer_add_parameter(opt, "mlp.hidden1.bias", 1, s_b1, OJ_DTYPE_F32, m->b1, OJ_DTYPE_F32, g.b1, OJ_TAG_AUTO));
  TRY(oj_optimizer_add_parameter(opt, "mlp.hidden2.weight", 2, s_w2, OJ_DTYPE_F32, m->w2, OJ_DTYPE_F32, g.w2, hidden));
  TRY(oj_optimizer_add_parameter(opt, "mlp.hidden2.bias", 1, s_b1, OJ_DTYPE_F32, m->b2, OJ_DTYPE_F32, g.b2, OJ_TAG_AUTO));
  /* The output layer is a matrix, but Muon is for hidden layers: tagged AdamW explicitly. */
  TRY(oj_optimizer_add_parameter(opt, "mlp.out.weight", 2, s_w3, OJ_DTYPE_F32, m->w3, OJ_DTYPE_F32, g.w3, OJ_TAG_ADAMW));
  TRY(oj_optimizer_add_parameter(opt, "mlp.out.bias", 1, s_b3, OJ_DTYPE_F32, m->b3, OJ_DTYPE_F32, g.b3, OJ_TAG_AUTO));
#ifdef ORTHOJIT_EXAMPLE_MPI
  {
    MPI_Comm world = MPI_COMM_WORLD;
    TRY(oj_optimizer_set_option(opt, "zero.stage", o->zero_stage));
    TRY(oj_optimizer_set_option(opt, "zero.average_gradients", "false")); /* each rank's gradient is a part of the mean */
    TRY(oj_optimizer_distribute_mpi(opt, &world));
  }
#endif
  TRY(oj_optimizer_build(opt));

  say("%s run (preset %s, muon.backend %s, %d rank%s):", hybrid ? "hybrid" : "adamw", o->preset, o->backend, g_world, g_world > 1 ? "s" : "");
  TRY(oj_optimizer_parameter_count(opt, &count));
  for (i = 0; i < count; ++i) {
    oj_parameter_info info;
    TRY(oj_optimizer_parameter_info(opt, i, &info));
    say(" %s=%s", info.name, info.uses_muon ? "muon" : "adamw");
  }
  say("\n");
  TRY(oj_optimizer_state_bytes(opt, &muon_bytes, &adam_bytes));
  *state_bytes = muon_bytes + adam_bytes;

  evaluate(m, x, y, N_TRAIN, &loss, &accuracy);
  losses[point++] = loss;
  for (step = 0; step < o->steps; ++step) {
    const int* batch = order + (step % (N_TRAIN / BATCH)) * BATCH;
    oj_step_report report;
    /* Linear decay to 10% of the initial learning rates over the run. */
    const double frac = 1.0 - 0.9 * (double)step / (double)o->steps;
    TRY(oj_optimizer_set_learning_rates(opt, muon_lr * frac, adam_lr * frac));
    backward(m, &g, x, y, batch, &a);
    TRY(oj_optimizer_step(opt, &report));
    if (strcmp(o->zero_stage, "3") == 0) TRY(oj_optimizer_gather_parameters(opt, NULL)); /* the partitions back into every rank's model */
    if (report.skipped) fprintf(stderr, "train_mlp: step %d skipped: %s\n", step + 1, oj_optimizer_skip_reason(opt));
    if ((step + 1) % o->every == 0 || step + 1 == o->steps) {
      evaluate(m, x, y, N_TRAIN, &loss, &accuracy);
      losses[point++] = loss;
    }
  }
  evaluate(m, x_test, y_test, N_TEST, test_loss, test_accuracy);
  oj_optimizer_destroy(opt);
  return 0;
}

int main(int argc, char** argv) {
  static float x[N_TRAIN * D_IN], x_test[N_TEST * D_IN], tw1[TEACHER_H * D_IN], tw2[D_OUT * TEACHER_H];
  static int y[N_TRAIN], y_test[N_TEST], order[N_TRAIN];
  static mlp initial, hybrid_model, adamw_model;
  options o = {600, 50, NULL, "keller", "0.02", "0.01", "2"};
  double *hybrid_losses, *adamw_losses, hybrid_accuracy = 0, adamw_accuracy = 0, hybrid_test_loss = 0, adamw_test_loss = 0;
  int64_t hybrid_bytes = 0, adamw_bytes = 0;
  int i, points, counts[D_OUT] = {0};

#ifdef ORTHOJIT_EXAMPLE_MPI
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world);
#endif
  for (i = 1; i < argc; ++i) {
    const char* value = i + 1 < argc ? argv[i + 1] : NULL;
    if (!value) {
      fprintf(stderr, "train_mlp: %s needs a value\n", argv[i]);
      return 2;
    }
    if (strcmp(argv[i], "--steps") == 0) o.steps = atoi(value);
    else if (strcmp(argv[i], "--every") == 0) o.every = atoi(value);
    else if (strcmp(argv[i], "--backend") == 0) o.backend = value;
    else if (strcmp(argv[i], "--preset") == 0) o.preset = value;
    else if (strcmp(argv[i], "--muon-lr") == 0) o.muon_lr = value;
    else if (strcmp(argv[i], "--adam-lr") == 0) o.adam_lr = value;
#ifdef ORTHOJIT_EXAMPLE_MPI
    else if (strcmp(argv[i], "--zero-stage") == 0) o.zero_stage = value;
#endif
    else {
      fprintf(stderr, "usage: train_mlp [--steps N] [--every N] [--backend cpu|ref|cuda] [--preset NAME] [--muon-lr X] [--adam-lr X]%s\n",
#ifdef ORTHOJIT_EXAMPLE_MPI
              " [--zero-stage 1|2|3]"
#else
              ""
#endif
      );
      return 2;
    }
    ++i;
  }
  if (o.steps < 1 || o.every < 1) {
    fprintf(stderr, "train_mlp: --steps and --every must be positive\n");
    return 2;
  }
  /* The CPU backend when this build has it (it always should), else the f64 reference. */
  if (!o.backend) o.backend = strstr(oj_available_backends(), "cpu") ? "cpu" : "ref";

  /* The same data, order and initialization for both runs. */
  for (i = 0; i < TEACHER_H * D_IN; ++i) tw1[i] = gaussian() * 2.0f / sqrtf((float)D_IN);
  for (i = 0; i < D_OUT * TEACHER_H; ++i) tw2[i] = gaussian() * 2.0f / sqrtf((float)TEACHER_H);
  make_data(x, y, N_TRAIN, tw1, tw2);
  make_data(x_test, y_test, N_TEST, tw1, tw2);
  for (i = 0; i < N_TRAIN; ++i) {
    order[i] = i;
    counts[y[i]]++;
  }
  for (i = N_TRAIN - 1; i > 0; --i) { /* one fixed shuffle, cycled through */
    int j = (int)(uniform01() * (i + 1)), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  init_mlp(&initial);
  hybrid_model = initial;
  adamw_model = initial;

  say("orthojit %s (C API %d), backends %s\n", oj_version(), oj_api_version(), oj_available_backends());
  say("MLP %d -> %d -> %d -> %d (tanh, softmax cross-entropy), %d training / %d held-out samples from a random teacher, batch %d, %d steps\n", D_IN, D_H,
         D_H, D_OUT, N_TRAIN, N_TEST, BATCH, o.steps);
  say("class counts:");
  for (i = 0; i < D_OUT; ++i) say(" %d", counts[i]);
  say("\nlearning rates: muon %s, adam %s, decayed linearly to 10%%\n", o.muon_lr, o.adam_lr);

  points = o.steps / o.every + 2;
  hybrid_losses = calloc((size_t)points, sizeof(double));
  adamw_losses = calloc((size_t)points, sizeof(double));
  if (!hybrid_losses || !adamw_losses) return 1;
  if (train(&o, 1, &hybrid_model, x, y, order, hybrid_losses, &hybrid_test_loss, &hybrid_accuracy, x_test, y_test, &hybrid_bytes)) return 1;
  if (train(&o, 0, &adamw_model, x, y, order, adamw_losses, &adamw_test_loss, &adamw_accuracy, x_test, y_test, &adamw_bytes)) return 1;

  say("\n%6s  %12s  %12s\n", "step", "muon+adamw", "adamw");
  {
    int point = 0, step;
    say("%6d  %12.5f  %12.5f\n", 0, hybrid_losses[point], adamw_losses[point]);
    ++point;
    for (step = 1; step <= o.steps; ++step)
      if (step % o.every == 0 || step == o.steps) {
        say("%6d  %12.5f  %12.5f\n", step, hybrid_losses[point], adamw_losses[point]);
        ++point;
      }
    points = point;
  }
  say("\n%-11s %10s %14s %17s %18s\n", "final", "train loss", "held-out loss", "held-out accuracy", g_world > 1 ? "state on rank 0" : "optimizer state");
  say("%-11s %10.5f %14.5f %16.1f%% %12lld bytes\n", "muon+adamw", hybrid_losses[points - 1], hybrid_test_loss, 100.0 * hybrid_accuracy,
         (long long)hybrid_bytes);
  say("%-11s %10.5f %14.5f %16.1f%% %12lld bytes\n", "adamw", adamw_losses[points - 1], adamw_test_loss, 100.0 * adamw_accuracy,
         (long long)adamw_bytes);
  {
    const int ok = hybrid_losses[points - 1] < hybrid_losses[0] && isfinite(hybrid_losses[points - 1]);
    if (!ok) fprintf(stderr, "train_mlp: the hybrid run did not reduce the loss (%.5f -> %.5f)\n", hybrid_losses[0], hybrid_losses[points - 1]);
    free(hybrid_losses);
    free(adamw_losses);
#ifdef ORTHOJIT_EXAMPLE_MPI
    MPI_Finalize();
#endif
    return ok ? 0 : 1;
  }
}
