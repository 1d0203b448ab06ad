/* The C API (include/orthojit/orthojit.h) used from C99: every entry point, its errors, and the
 * optimizer's arithmetic against independent computations written here from the documented
 * formulas. Prints each failed check and exits 1 when any failed. */
#define _POSIX_C_SOURCE 200809L /* getpid, pthreads under -std=c99 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "orthojit/orthojit.h"

#include "tests/c_check.h"

static void fill(float* values, size_t count, float scale) {
  size_t i;
  for (i = 0; i < count; ++i) values[i] = scale * uniform();
}

static uint16_t to_bf16(float value) { /* round to nearest even (finite values) */
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}
static float from_bf16(uint16_t value) {
  uint32_t bits = (uint32_t)value << 16;
  float result;
  memcpy(&result, &bits, sizeof result);
  return result;
}

static int backend_available(const char* name) {
  const char* list = oj_available_backends();
  size_t length = strlen(name);
  const char* at = list;
  while ((at = strstr(at, name)) != NULL) {
    if ((at == list || at[-1] == ',') && (at[length] == ',' || at[length] == '\0')) return 1;
    at += length;
  }
  return 0;
}

static double max_abs_diff(const float* a, const float* b, size_t count) {
  double worst = 0;
  size_t i;
  for (i = 0; i < count; ++i) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (d > worst || d != d) worst = d;
  }
  return worst;
}

static char g_path_a[256], g_path_b[256], g_path_json[256];

/* ------------------------------------------------------------------------------------------- */

static void test_version(void) {
  CHECK(oj_api_version() == OJ_API_VERSION);
  CHECK(oj_version() != NULL && strlen(oj_version()) >= 5);
  CHECK(backend_available("ref"));
#ifdef ORTHOJIT_HAVE_CPU_BACKEND
  CHECK(backend_available("cpu"));
#else
  /* A build without LLVM 19 (cmake/optional_parts.cmake, the GPU machines' build) has no cpu backend. */
  CHECK(!backend_available("cpu"));
#endif
  CHECK(strcmp(oj_status_name(OJ_OK), "OJ_OK") == 0);
  CHECK(strcmp(oj_status_name(OJ_INVALID_ARGUMENT), "OJ_INVALID_ARGUMENT") == 0);
  CHECK(strcmp(oj_status_name((oj_status)99), "OJ_UNKNOWN_STATUS") == 0);
}

static void* other_thread(void* message) {
  /* Nothing has failed on this thread: its last error is empty whatever the main thread did. */
  *(int*)message = strcmp(oj_last_error(), "") == 0;
  return NULL;
}

static void test_errors(void) {
  oj_optimizer* opt = NULL;
  float w[4] = {0}, g[4] = {0};
  int64_t shape1[1] = {4}, shape2[2] = {2, 2}, zero[2] = {2, 0};
  int empty_elsewhere = 0;
  pthread_t thread;

  CHECK_FAILS(oj_optimizer_create(NULL, &opt), OJ_INVALID_ARGUMENT, "preset");
  CHECK_FAILS(oj_optimizer_create("adamw-please", &opt), OJ_INVALID_ARGUMENT, "deepspeed");
  CHECK(strstr(oj_last_error(), "keller") != NULL && strstr(oj_last_error(), "moonlight") != NULL && strstr(oj_last_error(), "torch") != NULL);
  CHECK(strstr(oj_last_error(), "adamw-please") != NULL);
  CHECK(opt == NULL); /* untouched on failure */
  CHECK_FAILS(oj_optimizer_create("keller", NULL), OJ_INVALID_ARGUMENT, "out");

  /* The last error is per thread. */
  CHECK(pthread_create(&thread, NULL, other_thread, &empty_elsewhere) == 0);
  CHECK(pthread_join(thread, NULL) == 0);
  CHECK(empty_elsewhere);
  CHECK(strstr(oj_last_error(), "out") != NULL); /* and stays after a success */
  CHECK(oj_api_version() == OJ_API_VERSION && strstr(oj_last_error(), "out") != NULL);

  /* Null handles. */
  CHECK_FAILS(oj_optimizer_set_option(NULL, "muon.lr", "0.1"), OJ_INVALID_ARGUMENT, "optimizer is NULL");
  CHECK_FAILS(oj_optimizer_step(NULL, NULL), OJ_INVALID_ARGUMENT, "optimizer is NULL");
  CHECK_FAILS(oj_optimizer_build(NULL), OJ_INVALID_ARGUMENT, "optimizer is NULL");
  CHECK_FAILS(oj_optimizer_add_parameter(NULL, "w", 2, shape2, OJ_DTYPE_F32, w, OJ_DTYPE_F32, g, OJ_TAG_AUTO), OJ_INVALID_ARGUMENT, "optimizer is NULL");
  CHECK_FAILS(oj_optimizer_save_state(NULL, "x"), OJ_INVALID_ARGUMENT, "optimizer is NULL");
  CHECK_FAILS(oj_optimizer_set_learning_rates(NULL, 0.1, 0.1), OJ_INVALID_ARGUMENT, "optimizer is NULL");
  CHECK(strcmp(oj_optimizer_skip_reason(NULL), "") == 0);
  oj_optimizer_destroy(NULL); /* a no-op */

  CHECK_OK(oj_optimizer_create("keller", &opt));
  if (!opt) return;
  CHECK_FAILS(oj_optimizer_set_option(opt, "muon.learning_rate", "0.1"), OJ_INVALID_ARGUMENT, "muon.lr");
  CHECK_FAILS(oj_optimizer_set_option(opt, "muon.lr", "fast"), OJ_INVALID_ARGUMENT, "not a finite number");
  CHECK_FAILS(oj_optimizer_set_option(opt, "muon.momentum", "1.5"), OJ_INVALID_ARGUMENT, "[0, 1)");
  CHECK_FAILS(oj_optimizer_set_option(opt, NULL, "1"), OJ_INVALID_ARGUMENT, "key");
  CHECK_FAILS(oj_optimizer_set_option(opt, "muon.lr", NULL), OJ_INVALID_ARGUMENT, "value");
  CHECK_FAILS(oj_optimizer_set_learning_rates(opt, -1, 0.1), OJ_INVALID_ARGUMENT, "muon_lr");
  CHECK_FAILS(oj_optimizer_set_learning_rates(opt, 0.1, NAN), OJ_INVALID_ARGUMENT, "adam_lr");

  /* A Muon-tagged 1-D parameter. */
  CHECK_FAILS(oj_optimizer_add_parameter(opt, "norm.weight", 1, shape1, OJ_DTYPE_F32, w, OJ_DTYPE_F32, g, OJ_TAG_MUON), OJ_INVALID_ARGUMENT, "norm.weight");
  CHECK(strstr(oj_last_error(), "ndim >= 2") != NULL);
  /* Bad enums, shapes, pointers. */
  CHECK_FAILS(oj_optimizer_add_parameter(opt, "w", 2, shape2, (oj_dtype)7, w, OJ_DTYPE_F32, g, OJ_TAG_AUTO), OJ_INVALID_ARGUMENT, "oj_dtype");
  CHECK_FAILS(oj_optimizer_add_parameter(opt, "w", 2, shape2, OJ_DTYPE_F32, w, (oj_dtype)-1, g, OJ_TAG_AUTO), OJ_INVALID_ARGUMENT, "grad_dtype");
  CHECK_FAILS(oj_optimizer_add_parameter(opt, "w", 2, shape2, OJ_DTYPE_F32, w, OJ_DTYPE_F32, g, (oj_tag)9), OJ_INVALID_ARGUMENT, "oj_tag");
  CHECK_FAILS(oj_optimizer_add_parameter(opt, "w", 2, zero, OJ_DTYPE_F32, w, OJ_DTYPE_F32, g, OJ_TAG_AUTO), OJ_INVALID_ARGUMENT, "dimension 1 is 0");
  CHECK_FAILS(oj_optimizer_add_parameter(opt, "w", 0, shape2, OJ_DTYPE_F32, w, OJ_DTYPE_F32, g, OJ_TAG_AUTO), OJ_INVALID_ARGUMENT, "ndim");
  CHECK_FAILS(oj_optimizer_add_parameter(opt, "w", 2, NULL, OJ_DTYPE_F32, w, OJ_DTYPE_F32, g, OJ_TAG_AUTO), OJ_INVALID_ARGUMENT, "shape");
  CHECK_FAILS(oj_optimizer_add_parameter(opt, "w", 2, shape2, OJ_DTYPE_F32, NULL, OJ_DTYPE_F32, g, OJ_TAG_AUTO), OJ_INVALID_ARGUMENT, "data");
  CHECK_FAILS(oj_optimizer_add_parameter(opt, "", 2, shape2, OJ_DTYPE_F32, w, OJ_DTYPE_F32, g, OJ_TAG_AUTO), OJ_INVALID_ARGUMENT, "name");
  CHECK_OK(oj_optimizer_add_parameter(opt, "w", 2, shape2, OJ_DTYPE_F32, w, OJ_DTYPE_F32, g, OJ_TAG_AUTO));
  CHECK_FAILS(oj_optimizer_add_parameter(opt, "w", 2, shape2, OJ_DTYPE_F32, w, OJ_DTYPE_F32, g, OJ_TAG_AUTO), OJ_INVALID_ARGUMENT, "already added");
  CHECK_FAILS(oj_optimizer_set_gradient(opt, "v", g, OJ_DTYPE_F32), OJ_INVALID_ARGUMENT, "'v'");
  CHECK_FAILS(oj_optimizer_set_data(opt, "w", NULL), OJ_INVALID_ARGUMENT, "data");
  CHECK_FAILS(oj_optimizer_set_parameter_split(opt, "w", (oj_layout)5, 0, NULL, 0), OJ_INVALID_ARGUMENT, "oj_layout");
  CHECK_FAILS(oj_optimizer_set_parameter_split(opt, "w", OJ_LAYOUT_AUTO, 2, NULL, 0), OJ_INVALID_ARGUMENT, "row_splits");
  CHECK_FAILS(oj_optimizer_parameter_info(opt, 1, NULL), OJ_INVALID_ARGUMENT, "out");
  {
    oj_parameter_info info;
    CHECK_FAILS(oj_optimizer_parameter_info(opt, 1, &info), OJ_INVALID_ARGUMENT, "index 1");
  }

  /* A backend this machine cannot run is OJ_UNAVAILABLE when the optimizer is built; the handle
   * stays in the collecting phase, so the option can be fixed. */
  if (!backend_available("cuda")) {
    CHECK_OK(oj_optimizer_set_option(opt, "muon.backend", "cuda"));
    CHECK_FAILS(oj_optimizer_build(opt), OJ_UNAVAILABLE, "cuda");
    CHECK_OK(oj_optimizer_set_option(opt, "muon.backend", "ref"));
  }
  /* An unknown program fails at build, naming the shipped ones. */
  CHECK_OK(oj_optimizer_set_option(opt, "muon.program", "no_such_program"));
  CHECK_FAILS(oj_optimizer_build(opt), OJ_INVALID_ARGUMENT, "jordan_ns5");
  CHECK_OK(oj_optimizer_set_option(opt, "muon.program", "jordan_ns5"));
  CHECK_OK(oj_optimizer_build(opt));
  CHECK_OK(oj_optimizer_build(opt)); /* again: a no-op */
  oj_optimizer_destroy(opt);
}

/* One Muon step against p − lr·s·NS(g), NS computed by oj_orthogonalize with the same program,
 * backend and strategy: momentum 0 and Nesterov off make the update direction g itself (EMA
 * momentum: M ← M + (1 − 0)(g − M) = g; U = M), weight decay 0 leaves p·1, s = sqrt(max(1, rows/cols)). */
static void test_muon_step(void) {
  enum { R = 8, C = 4, N = R * C };
  float w[N], w0[N], g[N], o[N];
  int64_t shape[2] = {R, C};
  const double lr = 0.05, s = sqrt(2.0); /* sqrt(8/4) */
  oj_optimizer* opt = NULL;
  oj_step_report report;
  int64_t muon_bytes = -1, adam_bytes = -1, steps = -1, count = 0;
  oj_parameter_info info;
  const char* text = NULL;
  int i;

  fill(w, N, 0.5f);
  fill(g, N, 1.0f);
  memcpy(w0, w, sizeof w);
  CHECK_OK(oj_optimizer_create("keller", &opt));
  if (!opt) return;
  CHECK_OK(oj_optimizer_set_option(opt, "muon.backend", "ref"));
  CHECK_OK(oj_optimizer_set_option(opt, "muon.program", "jordan_ns5"));
  CHECK_OK(oj_optimizer_set_option(opt, "muon.strategy", "standard"));
  CHECK_OK(oj_optimizer_set_option(opt, "muon.momentum", "0"));
  CHECK_OK(oj_optimizer_set_option(opt, "muon.nesterov", "false"));
  CHECK_OK(oj_optimizer_set_option(opt, "muon.weight_decay", "0"));
  CHECK_OK(oj_optimizer_set_option(opt, "muon.lr_adjust", "original"));
  CHECK_OK(oj_optimizer_set_learning_rates(opt, lr, 1e-3));
  CHECK_OK(oj_optimizer_describe(opt, &text));
  CHECK(text != NULL && strstr(text, "muon.lr = 0.05") != NULL && strstr(text, "muon.backend = ref") != NULL);
  /* A hidden matrix: the rule tags it Muon. */
  CHECK_OK(oj_optimizer_add_parameter(opt, "layers.0.mlp.weight", 2, shape, OJ_DTYPE_F32, w, OJ_DTYPE_F32, g, OJ_TAG_AUTO));
  CHECK_OK(oj_optimizer_step(opt, &report)); /* builds */
  CHECK(report.skipped == 0 && report.muon_updated == 1 && report.adam_updated == 0 && report.without_gradient == 0);
  CHECK(report.steps_taken == 1);
  CHECK(strcmp(oj_optimizer_skip_reason(opt), "") == 0);

  CHECK_OK(oj_orthogonalize("jordan_ns5", "ref", "standard", 1, R, C, g, o));
  {
    double worst = 0;
    for (i = 0; i < N; ++i) {
      float expected = (float)((double)w0[i] - lr * s * (double)o[i]);
      double d = fabs((double)expected - (double)w[i]);
      if (d > worst) worst = d;
    }
    if (worst > 1e-6) fprintf(stderr, "muon step: max |p - (p0 - lr*s*NS(g))| = %g\n", worst);
    CHECK(worst <= 1e-6);
    /* Not trivially equal: the update moved the weights by about lr·s. */
    CHECK(max_abs_diff(w, w0, N) > 0.2 * lr * s);
  }

  CHECK_OK(oj_optimizer_state_bytes(opt, &muon_bytes, &adam_bytes));
  CHECK(muon_bytes == 4 * N && adam_bytes == 0);
  CHECK_OK(oj_optimizer_steps_taken(opt, &steps));
  CHECK(steps == 1);
  CHECK_OK(oj_optimizer_parameter_count(opt, &count));
  CHECK(count == 1);
  CHECK_OK(oj_optimizer_parameter_info(opt, 0, &info));
  CHECK(strcmp(info.name, "layers.0.mlp.weight") == 0 && info.uses_muon == 1 && info.optimized == 1);
  CHECK(info.batch == 1 && info.rows == R && info.cols == C && info.blocks == 1 && info.state_bytes == 4 * N);

  /* After build: the learning rates may change, nothing else; no more parameters. */
  CHECK_OK(oj_optimizer_set_option(opt, "muon.lr", "0.01"));
  CHECK_OK(oj_optimizer_describe(opt, &text));
  CHECK(text != NULL && strstr(text, "muon.lr = 0.01") != NULL);
  CHECK_FAILS(oj_optimizer_set_option(opt, "muon.momentum", "0.9"), OJ_INVALID_STATE, "muon.momentum");
  CHECK_FAILS(oj_optimizer_set_option(opt, "muon.bogus", "0.9"), OJ_INVALID_ARGUMENT, "muon.bogus");
  CHECK_FAILS(oj_optimizer_add_parameter(opt, "late", 2, shape, OJ_DTYPE_F32, w, OJ_DTYPE_F32, g, OJ_TAG_AUTO), OJ_INVALID_STATE, "before the optimizer is built");
  CHECK_FAILS(oj_optimizer_set_parameter_split(opt, "layers.0.mlp.weight", OJ_LAYOUT_AUTO, 0, NULL, 4), OJ_INVALID_STATE, "before the optimizer is built");

  /* No gradient: keller (missing_grad = zero, as Keller Jordan's code) steps it with zeros; with
   * momentum 0 and weight decay 0 that update is NS(0) = 0, so the parameter stays, counted. */
  memcpy(w0, w, sizeof w);
  CHECK_OK(oj_optimizer_describe(opt, &text));
  CHECK(text != NULL && strstr(text, "missing_grad = zero") != NULL);
  CHECK_OK(oj_optimizer_set_gradient(opt, "layers.0.mlp.weight", NULL, OJ_DTYPE_F32));
  CHECK_OK(oj_optimizer_step(opt, &report));
  CHECK(report.skipped == 0 && report.muon_updated == 1 && report.without_gradient == 1);
  CHECK(memcmp(w, w0, sizeof w) == 0);
  oj_optimizer_destroy(opt);
}

/* One AdamW step against the closed form of the standard formula at t = 1:
 * m = (1−β1)g, v = (1−β2)g² (each rounded to f32, the state's type), bc1 = 1−β1, bc2 = 1−β2,
 * p ← p·(1 − lr·wd) − lr·(m/bc1)/(√(v/bc2) + eps) ≈ p·(1 − lr·wd) − lr·g/(|g| + eps). */
static void test_adam_step(void) {
  enum { N = 7 };
  float b[N], b0[N], g[N];
  int64_t shape[1] = {N};
  const double lr = 0.01, wd = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  oj_optimizer* opt = NULL;
  oj_step_report report;
  int64_t muon_bytes = -1, adam_bytes = -1;
  int i;

  fill(b, N, 1.0f);
  fill(g, N, 0.3f);
  g[3] = 0; /* m = v = 0: only the decay */
  memcpy(b0, b, sizeof b);
  CHECK_OK(oj_optimizer_create("keller", &opt));
  if (!opt) return;
  CHECK_OK(oj_optimizer_set_option(opt, "adam.lr", "0.01"));
  CHECK_OK(oj_optimizer_set_option(opt, "adam.weight_decay", "0.1"));
  CHECK_OK(oj_optimizer_set_option(opt, "adam.beta1", "0.9"));
  CHECK_OK(oj_optimizer_set_option(opt, "adam.beta2", "0.95"));
  CHECK_OK(oj_optimizer_set_option(opt, "adam.eps", "1e-8"));
  CHECK_OK(oj_optimizer_set_option(opt, "adam.formula", "standard"));
  CHECK_OK(oj_optimizer_add_parameter(opt, "layers.0.bias", 1, shape, OJ_DTYPE_F32, b, OJ_DTYPE_F32, g, OJ_TAG_AUTO)); /* 1-D: AdamW */
  CHECK_OK(oj_optimizer_step(opt, &report));
  CHECK(report.skipped == 0 && report.adam_updated == 1 && report.muon_updated == 0);
  {
    double worst = 0, closed_worst = 0;
    for (i = 0; i < N; ++i) {
      double gi = (double)g[i];
      float m = (float)((1.0 - beta1) * gi), v = (float)((1.0 - beta2) * gi * gi);
      double expected = (double)b0[i] * (1.0 - lr * wd) - lr * ((double)m / (1.0 - beta1)) / (sqrt((double)v / (1.0 - beta2)) + eps);
      double closed = (double)b0[i] * (1.0 - lr * wd) - lr * gi / (fabs(gi) + eps);
      double d = fabs(expected - (double)b[i]), dc = fabs(closed - (double)b[i]);
      if (d > worst) worst = d;
      if (dc > closed_worst) closed_worst = dc;
    }
    if (worst > 1e-7 || closed_worst > 1e-6) fprintf(stderr, "adam step: max error %g (formula), %g (closed form)\n", worst, closed_worst);
    CHECK(worst <= 1e-7);
    CHECK(closed_worst <= 1e-6);
    CHECK(fabs((double)b[3] - (double)b0[3] * (1.0 - lr * wd)) <= 1e-7);
  }
  CHECK_OK(oj_optimizer_state_bytes(opt, &muon_bytes, &adam_bytes));
  CHECK(muon_bytes == 0 && adam_bytes == 8 * N);
  CHECK_OK(oj_optimizer_state_bytes(opt, NULL, NULL));
  oj_optimizer_destroy(opt);
}

/* A model with every kind of parameter, for the skip, save/load and split tests. */
typedef struct model {
  float w1[16 * 8], g1[16 * 8];     /* Muon, f32 */
  uint16_t w2[8 * 8], g2[8 * 8];    /* Muon, bf16 data and gradient */
  float b1[16], gb1[16];            /* AdamW (1-D) */
  float emb[10 * 8], gemb[10 * 8];  /* AdamW by the rule ("embed") */
  float head[4 * 8], ghead[4 * 8];  /* AdamW by tag */
  float frozen[8], gfrozen[8];      /* frozen */
} model;

static void model_init(model* m) {
  size_t i;
  fill(m->w1, 16 * 8, 0.3f);
  for (i = 0; i < 8 * 8; ++i) m->w2[i] = to_bf16(0.3f * uniform());
  fill(m->b1, 16, 0.1f);
  fill(m->emb, 10 * 8, 1.0f);
  fill(m->head, 4 * 8, 0.3f);
  fill(m->frozen, 8, 1.0f);
}

static void model_gradients(model* m, float scale) {
  size_t i;
  fill(m->g1, 16 * 8, scale);
  for (i = 0; i < 8 * 8; ++i) m->g2[i] = to_bf16(scale * uniform());
  fill(m->gb1, 16, scale);
  fill(m->gemb, 10 * 8, scale);
  fill(m->ghead, 4 * 8, scale);
  fill(m->gfrozen, 8, scale);
}

static oj_optimizer* model_optimizer(model* m, const char* preset) {
  oj_optimizer* opt = NULL;
  int64_t s1[2] = {16, 8}, s2[2] = {8, 8}, sb[1] = {16}, se[2] = {10, 8}, sh[2] = {4, 8}, sf[1] = {8};
  CHECK_OK(oj_optimizer_create(preset, &opt));
  if (!opt) return NULL;
  CHECK_OK(oj_optimizer_set_option(opt, "muon.backend", "ref"));
  CHECK_OK(oj_optimizer_add_parameter(opt, "layers.0.w1", 2, s1, OJ_DTYPE_F32, m->w1, OJ_DTYPE_F32, m->g1, OJ_TAG_AUTO));
  CHECK_OK(oj_optimizer_add_parameter(opt, "layers.0.w2", 2, s2, OJ_DTYPE_BF16, m->w2, OJ_DTYPE_BF16, m->g2, OJ_TAG_MUON));
  CHECK_OK(oj_optimizer_add_parameter(opt, "layers.0.b1", 1, sb, OJ_DTYPE_F32, m->b1, OJ_DTYPE_F32, m->gb1, OJ_TAG_AUTO));
  CHECK_OK(oj_optimizer_add_parameter(opt, "embed_tokens", 2, se, OJ_DTYPE_F32, m->emb, OJ_DTYPE_F32, m->gemb, OJ_TAG_AUTO));
  CHECK_OK(oj_optimizer_add_parameter(opt, "head", 2, sh, OJ_DTYPE_F32, m->head, OJ_DTYPE_F32, m->ghead, OJ_TAG_ADAMW));
  CHECK_OK(oj_optimizer_add_parameter(opt, "frozen", 1, sf, OJ_DTYPE_F32, m->frozen, OJ_DTYPE_F32, m->gfrozen, OJ_TAG_FROZEN));
  return opt;
}

static void test_tagging_and_skip(void) {
  static model m, before;
  oj_optimizer* opt;
  oj_step_report report;
  int64_t count = 0, i, steps = -1;
  const int expect_muon[6] = {1, 1, 0, 0, 0, 0}, expect_optimized[6] = {1, 1, 1, 1, 1, 0};

  model_init(&m);
  model_gradients(&m, 0.5f);
  opt = model_optimizer(&m, "deepspeed");
  if (!opt) return;
  CHECK_OK(oj_optimizer_parameter_count(opt, &count));
  CHECK(count == 6);
  for (i = 0; i < count && i < 6; ++i) {
    oj_parameter_info info;
    CHECK_OK(oj_optimizer_parameter_info(opt, i, &info));
    if (info.uses_muon != expect_muon[i] || info.optimized != expect_optimized[i])
      fprintf(stderr, "parameter %s: uses_muon %d optimized %d\n", info.name, (int)info.uses_muon, (int)info.optimized);
    CHECK(info.uses_muon == expect_muon[i]);
    CHECK(info.optimized == expect_optimized[i]);
  }

  /* A NaN in one gradient skips the whole step: nothing changes, and the reason names it. */
  m.gemb[5] = NAN;
  before = m;
  CHECK_OK(oj_optimizer_step(opt, &report));
  CHECK(report.skipped == 1 && report.muon_updated == 0 && report.adam_updated == 0);
  CHECK(strstr(oj_optimizer_skip_reason(opt), "embed_tokens") != NULL);
  CHECK(memcmp(&m, &before, sizeof m) == 0);
  CHECK_OK(oj_optimizer_steps_taken(opt, &steps));
  CHECK(steps == 0);
  /* An infinity in a bf16 gradient too. */
  m.gemb[5] = 0.25f;
  m.g2[3] = 0x7F80; /* +inf */
  before = m;
  CHECK_OK(oj_optimizer_step(opt, &report));
  CHECK(report.skipped == 1);
  CHECK(strstr(oj_optimizer_skip_reason(opt), "layers.0.w2") != NULL);
  CHECK(memcmp(&m, &before, sizeof m) == 0);

  /* Finite again: every optimized parameter moves, the frozen one does not. */
  m.g2[3] = to_bf16(0.1f);
  before = m;
  CHECK_OK(oj_optimizer_step(opt, &report));
  CHECK(report.skipped == 0 && report.muon_updated == 2 && report.adam_updated == 3);
  CHECK(strcmp(oj_optimizer_skip_reason(opt), "") == 0);
  CHECK(memcmp(m.w1, before.w1, sizeof m.w1) != 0);
  CHECK(memcmp(m.w2, before.w2, sizeof m.w2) != 0);
  CHECK(memcmp(m.b1, before.b1, sizeof m.b1) != 0);
  CHECK(memcmp(m.emb, before.emb, sizeof m.emb) != 0);
  CHECK(memcmp(m.head, before.head, sizeof m.head) != 0);
  CHECK(memcmp(m.frozen, before.frozen, sizeof m.frozen) == 0);
  {
    int finite = 1;
    for (i = 0; i < 64; ++i) finite = finite && isfinite(from_bf16(m.w2[i]));
    CHECK(finite);
  }
  /* Setting the frozen one's gradient is accepted and changes nothing. */
  CHECK_OK(oj_optimizer_set_gradient(opt, "frozen", m.gfrozen, OJ_DTYPE_F32));
  oj_optimizer_destroy(opt);
}

/* Save, step → A; load, restore the parameters, step with the same gradients → B: bit-identical. */
static void test_save_load(void) {
  static model m, saved, after_a, other;
  oj_optimizer* opt;
  oj_optimizer* mismatched = NULL;
  oj_step_report report;
  int64_t steps = -1;
  int k;
  float tiny[4] = {0}, gtiny[4] = {0};
  int64_t tiny_shape[2] = {2, 2};

  model_init(&m);
  opt = model_optimizer(&m, "keller"); /* sum momentum + Nesterov: the momentum matters */
  if (!opt) return;
  for (k = 0; k < 3; ++k) { /* some history in every buffer */
    model_gradients(&m, 0.5f);
    CHECK_OK(oj_optimizer_step(opt, &report));
  }
  CHECK_OK(oj_optimizer_save_state(opt, g_path_a));
  saved = m;
  model_gradients(&m, 0.5f);
  CHECK_OK(oj_optimizer_step(opt, &report));
  CHECK_OK(oj_optimizer_step(opt, &report)); /* two more steps, same gradients */
  after_a = m;
  CHECK_OK(oj_optimizer_steps_taken(opt, &steps));
  CHECK(steps == 5);

  CHECK_OK(oj_optimizer_load_state(opt, g_path_a));
  CHECK_OK(oj_optimizer_steps_taken(opt, &steps));
  CHECK(steps == 3);
  memcpy(m.w1, saved.w1, sizeof m.w1);
  memcpy(m.w2, saved.w2, sizeof m.w2);
  memcpy(m.b1, saved.b1, sizeof m.b1);
  memcpy(m.emb, saved.emb, sizeof m.emb);
  memcpy(m.head, saved.head, sizeof m.head);
  CHECK_OK(oj_optimizer_step(opt, &report));
  CHECK_OK(oj_optimizer_step(opt, &report));
  CHECK(memcmp(&m, &after_a, sizeof m) == 0);

  /* The same from a fresh optimizer (the state file is all that carries over). */
  other = saved;
  memcpy(other.g1, after_a.g1, sizeof other.g1);
  memcpy(other.g2, after_a.g2, sizeof other.g2);
  memcpy(other.gb1, after_a.gb1, sizeof other.gb1);
  memcpy(other.gemb, after_a.gemb, sizeof other.gemb);
  memcpy(other.ghead, after_a.ghead, sizeof other.ghead);
  {
    oj_optimizer* fresh = model_optimizer(&other, "keller");
    if (fresh) {
      CHECK_OK(oj_optimizer_load_state(fresh, g_path_a));
      CHECK_OK(oj_optimizer_step(fresh, &report));
      CHECK_OK(oj_optimizer_step(fresh, &report));
      CHECK(memcmp(other.w1, after_a.w1, sizeof other.w1) == 0);
      CHECK(memcmp(other.w2, after_a.w2, sizeof other.w2) == 0);
      CHECK(memcmp(other.b1, after_a.b1, sizeof other.b1) == 0);
      CHECK(memcmp(other.emb, after_a.emb, sizeof other.emb) == 0);
      CHECK(memcmp(other.head, after_a.head, sizeof other.head) == 0);
      oj_optimizer_destroy(fresh);
    }
  }

  /* Errors: no such file; a state of other parameters (nothing changes). */
  CHECK_FAILS(oj_optimizer_load_state(opt, "/nonexistent-dir/state.safetensors"), OJ_IO_ERROR, "nonexistent-dir");
  CHECK_FAILS(oj_optimizer_save_state(opt, "/nonexistent-dir/state.safetensors"), OJ_IO_ERROR, "nonexistent-dir");
  CHECK_FAILS(oj_optimizer_load_state(opt, NULL), OJ_INVALID_ARGUMENT, "path");
  CHECK_OK(oj_optimizer_create("keller", &mismatched));
  if (mismatched) {
    CHECK_OK(oj_optimizer_add_parameter(mismatched, "tiny", 2, tiny_shape, OJ_DTYPE_F32, tiny, OJ_DTYPE_F32, gtiny, OJ_TAG_ADAMW));
    CHECK_OK(oj_optimizer_save_state(mismatched, g_path_b));
    oj_optimizer_destroy(mismatched);
  }
  CHECK_OK(oj_optimizer_steps_taken(opt, &steps));
  {
    const int64_t steps_before = steps;
    oj_status status = oj_optimizer_load_state(opt, g_path_b);
    CHECK(status == OJ_IO_ERROR || status == OJ_INVALID_ARGUMENT);
    CHECK(strstr(oj_last_error(), "does not match") != NULL);
    CHECK_OK(oj_optimizer_steps_taken(opt, &steps));
    CHECK(steps == steps_before);
  }
  oj_optimizer_destroy(opt);
  remove(g_path_a);
  remove(g_path_b);
}

/* What the progress callback saw: each phase's last (done, total), the calls, and when to stop. */
typedef struct {
  int calls, stop_at_call, phases_seen;
  char phases[8][16];
  uint64_t last_done[8], last_total[8];
} progress_log;

static int record_progress(const char* phase, uint64_t done, uint64_t total, void* user_data) {
  progress_log* log = (progress_log*)user_data;
  ++log->calls;
  if (log->phases_seen == 0 || strcmp(log->phases[log->phases_seen - 1], phase) != 0) {
    if (log->phases_seen == 8) return 1;
    snprintf(log->phases[log->phases_seen++], sizeof log->phases[0], "%s", phase);
  }
  log->last_done[log->phases_seen - 1] = done;
  log->last_total[log->phases_seen - 1] = total;
  return log->calls == log->stop_at_call;
}

static long file_size(const char* path) {
  FILE* file = fopen(path, "rb");
  long size = -1;
  if (file && fseek(file, 0, SEEK_END) == 0) size = ftell(file);
  if (file) fclose(file);
  return size;
}

/* oj_optimizer_set_progress: a save reports its writes up to the state's bytes (4 per Muon
 * element, 8 per AdamW element and 8 per AdamW step count, counted here from the model) and the
 * flush; a load its checksum-free in-order reads; a non-zero return stops a save with the old
 * file in place and a load with nothing changed. */
static void test_save_load_progress(void) {
  static model m;
  oj_optimizer* opt;
  oj_step_report report;
  progress_log log;
  int64_t steps = -1;
  long size_before;
  const uint64_t state_bytes = 4 * (16 * 8 + 8 * 8) + 8 * (16 + 10 * 8 + 4 * 8) + 3 * 8; /* w1, w2; b1, embed_tokens, head */

  model_init(&m);
  opt = model_optimizer(&m, "keller");
  if (!opt) return;
  model_gradients(&m, 0.5f);
  CHECK_OK(oj_optimizer_step(opt, &report));
  CHECK_FAILS(oj_optimizer_set_progress(NULL, record_progress, &log), OJ_INVALID_ARGUMENT, "optimizer is NULL");
  memset(&log, 0, sizeof log);
  CHECK_OK(oj_optimizer_set_progress(opt, record_progress, &log));
  CHECK_OK(oj_optimizer_save_state(opt, g_path_a));
  CHECK(log.phases_seen == 2 && strcmp(log.phases[0], "write") == 0 && strcmp(log.phases[1], "sync") == 0);
  CHECK(log.last_done[0] == state_bytes && log.last_total[0] == state_bytes);
  CHECK(log.last_done[1] == 1 && log.last_total[1] == 1);

  memset(&log, 0, sizeof log);
  CHECK_OK(oj_optimizer_load_state(opt, g_path_a));
  CHECK(log.phases_seen == 1 && strcmp(log.phases[0], "read") == 0 && log.last_done[0] == state_bytes);

  /* Stopped at the third call of a save: OJ_IO_ERROR naming the stop, the file as it was. */
  size_before = file_size(g_path_a);
  model_gradients(&m, 0.5f);
  CHECK_OK(oj_optimizer_step(opt, &report));
  memset(&log, 0, sizeof log);
  log.stop_at_call = 3;
  CHECK_FAILS(oj_optimizer_save_state(opt, g_path_a), OJ_IO_ERROR, "stopped by the progress callback");
  CHECK(log.calls == 3 && file_size(g_path_a) == size_before);
  /* A load stopped at its second call: the two steps taken stay. */
  memset(&log, 0, sizeof log);
  log.stop_at_call = 2;
  CHECK_FAILS(oj_optimizer_load_state(opt, g_path_a), OJ_IO_ERROR, "stopped by the progress callback");
  CHECK_OK(oj_optimizer_steps_taken(opt, &steps));
  CHECK(steps == 2);
  /* NULL: no more calls. */
  CHECK_OK(oj_optimizer_set_progress(opt, NULL, NULL));
  memset(&log, 0, sizeof log);
  CHECK_OK(oj_optimizer_load_state(opt, g_path_a));
  CHECK(log.calls == 0);
  CHECK_OK(oj_optimizer_steps_taken(opt, &steps));
  CHECK(steps == 1);
  oj_optimizer_destroy(opt);
  remove(g_path_a);
}

/* QKV and per-head splits; a split that does not fit fails the build, which can then be fixed. */
static void test_splits_and_qk_clip(void) {
  enum { R = 12, C = 8 };
  float qkv[R * C], gqkv[R * C], q[4 * C], k[4 * C], q0[4 * C], k0[4 * C], gq[4 * C], gk[4 * C];
  int64_t shape[2] = {R, C}, qshape[2] = {4, C};
  int64_t bad[2] = {4, 4}, good[3] = {4, 4, 4};
  double s_max[2] = {200.0, 50.0};
  oj_optimizer* opt = NULL;
  oj_parameter_info info;
  int i;

  fill(qkv, R * C, 0.3f);
  fill(gqkv, R * C, 1.0f);
  fill(q, 4 * C, 0.3f);
  fill(k, 4 * C, 0.3f);
  fill(gq, 4 * C, 1.0f);
  fill(gk, 4 * C, 1.0f);
  CHECK_OK(oj_optimizer_create("keller", &opt));
  if (!opt) return;
  CHECK_OK(oj_optimizer_set_option(opt, "muon.backend", "ref"));
  CHECK_OK(oj_optimizer_add_parameter(opt, "attn.qkv", 2, shape, OJ_DTYPE_F32, qkv, OJ_DTYPE_F32, gqkv, OJ_TAG_MUON));
  CHECK_OK(oj_optimizer_add_parameter(opt, "attn.q", 2, qshape, OJ_DTYPE_F32, q, OJ_DTYPE_F32, gq, OJ_TAG_MUON));
  CHECK_OK(oj_optimizer_add_parameter(opt, "attn.k", 2, qshape, OJ_DTYPE_F32, k, OJ_DTYPE_F32, gk, OJ_TAG_MUON));
  CHECK_OK(oj_optimizer_set_parameter_split(opt, "attn.qkv", OJ_LAYOUT_AUTO, 2, bad, 0));
  CHECK_FAILS(oj_optimizer_build(opt), OJ_INVALID_ARGUMENT, "attn.qkv");
  CHECK_OK(oj_optimizer_set_parameter_split(opt, "attn.qkv", OJ_LAYOUT_AUTO, 3, good, 2));
  CHECK_OK(oj_optimizer_build(opt));
  CHECK_OK(oj_optimizer_parameter_info(opt, 0, &info));
  CHECK(info.uses_muon == 1 && info.rows == R && info.cols == C && info.blocks == 6);
  CHECK_OK(oj_optimizer_step(opt, NULL));

  /* QK-clip: head 0 (S_max 200 > tau 100) scaled by sqrt(100/200), head 1 untouched. */
  memcpy(q0, q, sizeof q);
  memcpy(k0, k, sizeof k);
  CHECK_OK(oj_optimizer_qk_clip(opt, "attn.q", "attn.k", 2, s_max, 2, 100.0));
  {
    double worst = 0;
    const double factor = sqrt(0.5);
    for (i = 0; i < 4 * C; ++i) {
      double expected_q = i < 2 * C ? (double)(float)((double)q0[i] * factor) : (double)q0[i];
      double expected_k = i < 2 * C ? (double)(float)((double)k0[i] * factor) : (double)k0[i];
      double d = fmax(fabs(expected_q - (double)q[i]), fabs(expected_k - (double)k[i]));
      if (d > worst) worst = d;
    }
    CHECK(worst == 0);
  }
  CHECK_FAILS(oj_optimizer_qk_clip(opt, "attn.q", "attn.k", 2, s_max, 1, 100.0), OJ_INVALID_ARGUMENT, "heads");
  CHECK_FAILS(oj_optimizer_qk_clip(opt, "attn.q", "attn.nope", 2, s_max, 2, 100.0), OJ_INVALID_ARGUMENT, "attn.nope");
  CHECK_FAILS(oj_optimizer_qk_clip(opt, "attn.q", "attn.k", 2, NULL, 2, 100.0), OJ_INVALID_ARGUMENT, "s_max");
  CHECK_FAILS(oj_optimizer_qk_clip(opt, "attn.q", "attn.k", 2, s_max, 2, -1.0), OJ_INVALID_ARGUMENT, "tau");
  oj_optimizer_destroy(opt);
}

static void test_orthogonalize(void) {
  enum { B = 2, R = 64, C = 256, N = B * R * C };
  static float input[N], ref[N], cpu[N], inplace[N];
  int i, j, b;

  fill(input, N, 1.0f);
  CHECK_OK(oj_orthogonalize("jordan_ns5", "ref", "standard", B, R, C, input, ref));
  /* Device memory: bad arguments first, then (without a usable CUDA device) OJ_UNAVAILABLE saying why. */
  CHECK_FAILS(oj_orthogonalize_device("jordan_ns5", "standard", B, R, C, NULL, cpu, NULL), OJ_INVALID_ARGUMENT, "input");
  CHECK_FAILS(oj_orthogonalize_device("jordan_ns5", "standard", B, R, C, input, (void*)input, NULL), OJ_INVALID_ARGUMENT, "distinct");
  if (!backend_available("cuda"))
    CHECK_FAILS(oj_orthogonalize_device("jordan_ns5", "standard", B, R, C, input, cpu, NULL), OJ_UNAVAILABLE, "cuda");
#ifdef ORTHOJIT_HAVE_CPU_BACKEND
  CHECK_OK(oj_orthogonalize("jordan_ns5", "cpu", "standard", B, R, C, input, cpu));
  {
    /* The cpu backend against the reference: both round to bf16, in different orders (at this
     * shape the cpu blocking differs from the reference's; tiny shapes can match bit for bit). */
    double diff = max_abs_diff(ref, cpu, N);
    if (diff > 0.01) fprintf(stderr, "orthogonalize: cpu vs ref max |diff| = %g\n", diff);
    CHECK(diff <= 0.01);
  }
#else
  /* Asking a build without LLVM 19 for the cpu backend says why it cannot, and what to use. */
  CHECK_FAILS(oj_orthogonalize("jordan_ns5", "cpu", "standard", B, R, C, input, cpu), OJ_UNAVAILABLE, "no CPU backend (");
  CHECK_FAILS(oj_orthogonalize("jordan_ns5", "cpu", "standard", B, R, C, input, cpu), OJ_UNAVAILABLE, "use backend ref or cuda");
#endif
  /* Near-orthogonal rows: the diagonal of O·Oᵀ is σ²-weighted, within Newton–Schulz's band
   * (σ in about [0.68, 1.14] for jordan_ns5). */
  for (b = 0; b < B; ++b)
    for (i = 0; i < R; ++i) {
      double dot = 0;
      for (j = 0; j < C; ++j) dot += (double)ref[(b * R + i) * C + j] * (double)ref[(b * R + i) * C + j];
      CHECK(dot > 0.4 && dot < 1.35);
    }
  /* In place (output == input) gives the same. */
  memcpy(inplace, input, sizeof input);
  CHECK_OK(oj_orthogonalize("jordan_ns5", "ref", "standard", B, R, C, inplace, inplace));
  CHECK(memcmp(inplace, ref, sizeof ref) == 0);
  /* Defaults (NULL backend: ref; NULL strategy: auto) run. */
  CHECK_OK(oj_orthogonalize("jordan_ns5_f32", NULL, NULL, B, R, C, input, inplace));

  CHECK_FAILS(oj_orthogonalize(NULL, "ref", "standard", B, R, C, input, ref), OJ_INVALID_ARGUMENT, "program");
  CHECK_FAILS(oj_orthogonalize("no_such_program", "ref", "standard", B, R, C, input, ref), OJ_INVALID_ARGUMENT, "jordan_ns5");
  CHECK_FAILS(oj_orthogonalize("jordan_ns5", "tpu", "standard", B, R, C, input, ref), OJ_INVALID_ARGUMENT, "tpu");
  CHECK_FAILS(oj_orthogonalize("jordan_ns5", "ref", "sideways", B, R, C, input, ref), OJ_INVALID_ARGUMENT, "sideways");
  CHECK_FAILS(oj_orthogonalize("jordan_ns5", "ref", "standard", B, 0, C, input, ref), OJ_INVALID_ARGUMENT, "> 0");
  CHECK_FAILS(oj_orthogonalize("jordan_ns5", "ref", "standard", B, R, C, NULL, ref), OJ_INVALID_ARGUMENT, "input");
  CHECK_FAILS(oj_orthogonalize("jordan_ns5", "ref", "standard", B, R, C, input, NULL), OJ_INVALID_ARGUMENT, "output");
  {
    /* A NaN or an infinity is refused, naming the element, and the output is left as it was (it
       once came back all NaN with OJ_OK). */
    const float saved = input[R * C + 3 * C + 5];
    memcpy(inplace, ref, sizeof ref);
    input[R * C + 3 * C + 5] = NAN;
    CHECK_FAILS(oj_orthogonalize("jordan_ns5", "ref", "standard", B, R, C, input, inplace), OJ_INVALID_ARGUMENT, "element (1, 3, 5) is nan");
    input[R * C + 3 * C + 5] = -INFINITY;
    CHECK_FAILS(oj_orthogonalize("jordan_ns5", "auto", "gram", B, R, C, input, inplace), OJ_INVALID_ARGUMENT, "element (1, 3, 5) is -inf");
    input[R * C + 3 * C + 5] = saved;
    for (i = 0; i < N; ++i)
      if (memcmp(&inplace[i], &ref[i], sizeof(float)) != 0) {
        fprintf(stderr, "FAIL %s:%d: a refused input changed output element %d\n", __FILE__, __LINE__, i);
        ++g_failures;
        break;
      }
  }
  if (!backend_available("cuda")) CHECK_FAILS(oj_orthogonalize("jordan_ns5", "cuda", "standard", B, R, C, input, ref), OJ_UNAVAILABLE, "cuda");
}

static void test_deepspeed_config(void) {
  oj_optimizer* opt = NULL;
  const char* text = NULL;
  FILE* file = fopen(g_path_json, "w");
  oj_status status;
  CHECK(file != NULL);
  if (!file) return;
  fputs("{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Muon\", \"params\": {\"lr\": 0.0125, \"momentum\": 0.9}}}\n", file);
  fclose(file);
  status = oj_optimizer_create_from_deepspeed_config(g_path_json, &opt);
  if (status == OJ_UNAVAILABLE) { /* a build without the reader */
    fprintf(stderr, "note: %s\n", oj_last_error());
    remove(g_path_json);
    return;
  }
  CHECK_OK(status);
  if (opt) {
    CHECK_OK(oj_optimizer_describe(opt, &text));
    CHECK(text != NULL && strstr(text, "muon.lr = 0.0125") != NULL && strstr(text, "muon.momentum = 0.9") != NULL);
    oj_optimizer_destroy(opt);
  }
  opt = NULL;
  CHECK_FAILS(oj_optimizer_create_from_deepspeed_config("/nonexistent-dir/ds.json", &opt), OJ_IO_ERROR, "nonexistent-dir");
  CHECK_FAILS(oj_optimizer_create_from_deepspeed_config("/tmp", &opt), OJ_IO_ERROR, "is a directory");
  file = fopen(g_path_json, "w");
  if (file) {
    fputs("{\"optimizer\": {\"type\": \"Muon\", \"params\": {\"lr\": 0.01, \"learning_rate_typo\": 1}}}\n", file);
    fclose(file);
    /* DeepSpeed ignores keys it does not know, and so does this reader (a warning on stderr
     * names the key and the valid ones); the keys it knows still apply. */
    CHECK_OK(oj_optimizer_create_from_deepspeed_config(g_path_json, &opt));
    CHECK_OK(oj_optimizer_describe(opt, &text));
    CHECK(text != NULL && strstr(text, "muon.lr = 0.01") != NULL);
    oj_optimizer_destroy(opt);
    opt = NULL;
  }
  file = fopen(g_path_json, "w");
  if (file) {
    fputs("{\"optimizer\": {\"type\": \"Muon\", \"params\": {\"lr\": \"0.01\"}}}\n", file);
    fclose(file);
    CHECK_FAILS(oj_optimizer_create_from_deepspeed_config(g_path_json, &opt), OJ_INVALID_ARGUMENT, "optimizer.params.lr: expected a number");
  }
  CHECK(opt == NULL);
  remove(g_path_json);
}

/* The CUDA driver, opened here the way orthojit opens it (this test links no CUDA library), for
 * device memory to hand the optimizer: cuMemAlloc'd buffers of device 0's primary context. */
typedef unsigned long long dptr;
static struct {
  int (*init)(unsigned);
  int (*device_get)(int*, int);
  int (*retain)(void**, int);
  int (*set_current)(void*);
  int (*alloc)(dptr*, size_t);
  int (*free_)(dptr);
  int (*htod)(dptr, const void*, size_t);
  int (*dtoh)(void*, dptr, size_t);
  int (*synchronize)(void);
} g_cu;

/* A symbol into a function pointer without converting an object pointer (ISO C forbids that). */
#define LOAD(field, name)                                 \
  do {                                                    \
    void* symbol_ = dlsym(library, name);                 \
    memcpy(&g_cu.field, &symbol_, sizeof symbol_);        \
  } while (0)

static int open_driver(void) {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  int device = 0;
  void* context = NULL;
  if (!library) return 0;
  LOAD(init, "cuInit");
  LOAD(device_get, "cuDeviceGet");
  LOAD(retain, "cuDevicePrimaryCtxRetain");
  LOAD(set_current, "cuCtxSetCurrent");
  LOAD(alloc, "cuMemAlloc_v2");
  LOAD(free_, "cuMemFree_v2");
  LOAD(htod, "cuMemcpyHtoD_v2");
  LOAD(dtoh, "cuMemcpyDtoH_v2");
  LOAD(synchronize, "cuCtxSynchronize");
  if (!g_cu.init || !g_cu.device_get || !g_cu.retain || !g_cu.set_current || !g_cu.alloc || !g_cu.free_ || !g_cu.htod || !g_cu.dtoh ||
      !g_cu.synchronize)
    return 0;
  return g_cu.init(0) == 0 && g_cu.device_get(&device, 0) == 0 && g_cu.retain(&context, device) == 0 && g_cu.set_current(context) == 0;
}

static dptr device_copy(const void* host, size_t bytes) {
  dptr pointer = 0;
  CHECK(g_cu.alloc(&pointer, bytes) == 0);
  CHECK(g_cu.htod(pointer, host, bytes) == 0);
  return pointer;
}

/* Where a CUDA device is usable: the same parameters and gradients stepped by a host optimizer
 * (ref backend) and a device one (memory = cuda, the legacy default stream). AdamW is the
 * generated kernel, the host's bits; Muon agrees within the Newton–Schulz kernels' rounding. A
 * NaN skips the device step and names the element; the device state loads into a host optimizer. */
static void test_device_steps(void) {
  enum { R = 64, C = 32, N = R * C, B = 32 };
  float w[N], gw[N], b[B], gb[B], w_host[N], b_host[B], w_dev[N], b_dev[B];
  int64_t shape_w[2] = {R, C}, shape_b[1] = {B};
  oj_optimizer *host = NULL, *dev = NULL;
  oj_step_report report;
  dptr dw, dgw, db, dgb;
  int step, i;
  double worst = 0;
  if (!open_driver()) {
    fprintf(stderr, "c_api_test: the cuda backend is available but this test could not open the driver itself; device steps not checked\n");
    return;
  }
  fill(w, N, 0.5f);
  fill(b, B, 0.5f);
  fill(gw, N, 1.0f);
  fill(gb, B, 1.0f);
  memcpy(w_host, w, sizeof w);
  memcpy(b_host, b, sizeof b);
  dw = device_copy(w, sizeof w);
  dgw = device_copy(gw, sizeof gw);
  db = device_copy(b, sizeof b);
  dgb = device_copy(gb, sizeof gb);
  CHECK_OK(oj_optimizer_create("keller", &host));
  CHECK_OK(oj_optimizer_create("keller", &dev));
  CHECK_OK(oj_optimizer_set_option(host, "muon.backend", "ref"));
  CHECK_OK(oj_optimizer_set_option(dev, "memory", "cuda"));
  CHECK_OK(oj_optimizer_add_parameter(host, "layers.0.mlp.weight", 2, shape_w, OJ_DTYPE_F32, w_host, OJ_DTYPE_F32, gw, OJ_TAG_AUTO));
  CHECK_OK(oj_optimizer_add_parameter(host, "layers.0.bias", 1, shape_b, OJ_DTYPE_F32, b_host, OJ_DTYPE_F32, gb, OJ_TAG_AUTO));
  CHECK_OK(oj_optimizer_add_parameter(dev, "layers.0.mlp.weight", 2, shape_w, OJ_DTYPE_F32, (void*)(uintptr_t)dw, OJ_DTYPE_F32,
                                      (const void*)(uintptr_t)dgw, OJ_TAG_AUTO));
  CHECK_OK(oj_optimizer_add_parameter(dev, "layers.0.bias", 1, shape_b, OJ_DTYPE_F32, (void*)(uintptr_t)db, OJ_DTYPE_F32, (const void*)(uintptr_t)dgb,
                                      OJ_TAG_AUTO));
  for (step = 0; step < 3; ++step) {
    CHECK_OK(oj_optimizer_step(host, &report));
    CHECK_OK(oj_optimizer_step_on_stream(dev, NULL, &report));
    CHECK(report.skipped == 0 && report.muon_updated == 1 && report.adam_updated == 1 && report.steps_taken == step + 1);
  }
  CHECK(g_cu.synchronize() == 0);
  CHECK(g_cu.dtoh(w_dev, dw, sizeof w_dev) == 0);
  CHECK(g_cu.dtoh(b_dev, db, sizeof b_dev) == 0);
  CHECK(memcmp(b_dev, b_host, sizeof b_dev) == 0); /* AdamW: the same bits */
  for (i = 0; i < N; ++i)
    if (fabs((double)w_dev[i] - (double)w_host[i]) > worst) worst = fabs((double)w_dev[i] - (double)w_host[i]);
  if (worst > 2e-3) fprintf(stderr, "device Muon steps: max |p_cuda - p_ref| = %g\n", worst);
  CHECK(worst <= 2e-3);
  CHECK(max_abs_diff(w_dev, w, N) > 1e-3); /* it moved */
  /* A NaN: nothing changes, and the reason names the element. */
  gb[7] = NAN;
  CHECK(g_cu.htod(dgb, gb, sizeof gb) == 0);
  CHECK_OK(oj_optimizer_step_on_stream(dev, NULL, &report));
  CHECK(report.skipped == 1 && report.steps_taken == 3);
  CHECK(strstr(oj_optimizer_skip_reason(dev), "parameter 'layers.0.bias': gradient element 7 is NaN") != NULL);
  CHECK(g_cu.dtoh(b_host, db, sizeof b_host) == 0);
  CHECK(memcmp(b_dev, b_host, sizeof b_dev) == 0);
  /* The device state is a host optimizer's state file. */
  CHECK_OK(oj_optimizer_save_state(dev, g_path_a));
  CHECK_OK(oj_optimizer_load_state(host, g_path_a));
  CHECK_OK(oj_optimizer_load_state(dev, g_path_a));
  remove(g_path_a);
  oj_optimizer_destroy(host);
  oj_optimizer_destroy(dev);
  g_cu.free_(dw);
  g_cu.free_(dgw);
  g_cu.free_(db);
  g_cu.free_(dgb);
}

/* Device memory (memory = cuda): the option's values, the step entry point each memory needs, and
 * without the cuda backend (this build or this machine) OJ_UNAVAILABLE saying why; with it, device
 * steps against host steps (test_device_steps). */
static void test_device_memory(void) {
  oj_optimizer* opt = NULL;
  float w[32], g[32];
  int64_t shape[2] = {4, 8};
  oj_step_report report;
  const char* text = NULL;
  fill(w, 32, 1.0f);
  fill(g, 32, 1.0f);
  CHECK_OK(oj_optimizer_create("keller", &opt));
  CHECK_FAILS(oj_optimizer_set_option(opt, "memory", "gpu"), OJ_INVALID_ARGUMENT, "expected host or cuda");
  CHECK_FAILS(oj_optimizer_set_option(opt, "memroy", "cuda"), OJ_INVALID_ARGUMENT, "memory (host | cuda)");
  CHECK_FAILS(oj_optimizer_set_option(opt, "memory", NULL), OJ_INVALID_ARGUMENT, "value");
  CHECK_OK(oj_optimizer_set_option(opt, "memory", "host"));
  CHECK_OK(oj_optimizer_describe(opt, &text));
  CHECK(text != NULL && strstr(text, "memory = host") != NULL);
  CHECK_OK(oj_optimizer_set_option(opt, "muon.backend", "ref"));
  CHECK_OK(oj_optimizer_add_parameter(opt, "w", 2, shape, OJ_DTYPE_F32, w, OJ_DTYPE_F32, g, OJ_TAG_MUON));
  /* A host optimizer is stepped by oj_optimizer_step only. */
  CHECK_FAILS(oj_optimizer_step_on_stream(opt, NULL, &report), OJ_INVALID_STATE, "use oj_optimizer_step");
  CHECK_FAILS(oj_optimizer_step_on_stream(NULL, NULL, &report), OJ_INVALID_ARGUMENT, "optimizer");
  CHECK_OK(oj_optimizer_step(opt, &report));
  CHECK(report.steps_taken == 1);
  /* The memory is fixed once built. */
  CHECK_FAILS(oj_optimizer_set_option(opt, "memory", "cuda"), OJ_INVALID_STATE, "before the optimizer is built");
  oj_optimizer_destroy(opt);

  CHECK_OK(oj_optimizer_create("deepspeed", &opt));
  if (!backend_available("cuda")) {
    CHECK_FAILS(oj_optimizer_set_option(opt, "memory", "cuda"), OJ_UNAVAILABLE, "memory = cuda needs the cuda backend");
    CHECK_FAILS(oj_optimizer_set_option(opt, "memory", "cuda"), OJ_UNAVAILABLE, "cuda");
    CHECK_OK(oj_optimizer_describe(opt, &text));
    CHECK(text != NULL && strstr(text, "memory = host") != NULL); /* unchanged */
  } else {
    /* A device optimizer is stepped by oj_optimizer_step_on_stream only (checked before build:
     * these host pointers are never touched), and host pointers are refused at build. */
    CHECK_OK(oj_optimizer_set_option(opt, "memory", "cuda"));
    CHECK_OK(oj_optimizer_describe(opt, &text));
    CHECK(text != NULL && strstr(text, "memory = cuda") != NULL);
    CHECK_OK(oj_optimizer_add_parameter(opt, "w", 2, shape, OJ_DTYPE_F32, w, OJ_DTYPE_F32, g, OJ_TAG_MUON));
    CHECK_FAILS(oj_optimizer_step(opt, &report), OJ_INVALID_STATE, "oj_optimizer_step_on_stream");
    CHECK_FAILS(oj_optimizer_build(opt), OJ_INVALID_ARGUMENT, "is not CUDA memory");
    test_device_steps();
  }
  oj_optimizer_destroy(opt);
}

/* muon.variant through the key=value options: a bad value names the valid ones; NorMuon's state
 * (one f32 per row on top of the momentum) shows in the state bytes; one step moves the parameter
 * by a finite amount; memory = cuda refuses the variant. */
static void test_variant_options(void) {
  enum { R = 6, C = 4, N = R * C };
  float w[N], w0[N], g[N];
  int64_t shape[2] = {R, C};
  int64_t muon_bytes = -1, adam_bytes = -1;
  oj_optimizer* opt = NULL;
  oj_step_report report;
  int i, moved = 0;
  fill(w, N, 0.5f);
  fill(g, N, 1.0f);
  memcpy(w0, w, sizeof w);
  CHECK_OK(oj_optimizer_create("keller", &opt));
  if (!opt) return;
  CHECK_FAILS(oj_optimizer_set_option(opt, "muon.variant", "adamw"), OJ_INVALID_ARGUMENT, "muon, normuon or adamuon");
  CHECK_OK(oj_optimizer_set_option(opt, "muon.variant", "normuon"));
  CHECK_OK(oj_optimizer_set_option(opt, "muon.beta2", "0.9"));
  CHECK_OK(oj_optimizer_set_option(opt, "muon.backend", "ref"));
  CHECK_OK(oj_optimizer_add_parameter(opt, "w", 2, shape, OJ_DTYPE_F32, w, OJ_DTYPE_F32, g, OJ_TAG_MUON));
  CHECK_OK(oj_optimizer_build(opt));
  CHECK_OK(oj_optimizer_state_bytes(opt, &muon_bytes, &adam_bytes));
  CHECK(muon_bytes == 4 * N + 4 * R && adam_bytes == 0);
  CHECK_OK(oj_optimizer_step(opt, &report));
  for (i = 0; i < N; ++i) moved += isfinite(w[i]) && w[i] != w0[i];
  CHECK(moved == N);
  oj_optimizer_destroy(opt);

  opt = NULL;
  CHECK_OK(oj_optimizer_create("keller", &opt));
  if (!opt) return;
  CHECK_OK(oj_optimizer_set_option(opt, "muon.variant", "adamuon"));
  if (oj_optimizer_set_option(opt, "memory", "cuda") == OJ_OK) {
    CHECK_OK(oj_optimizer_add_parameter(opt, "w", 2, shape, OJ_DTYPE_F32, w, OJ_DTYPE_F32, g, OJ_TAG_MUON));
    CHECK(oj_optimizer_build(opt) != OJ_OK);
    CHECK(strstr(oj_last_error(), "muon.variant = adamuon") != NULL || strstr(oj_last_error(), "cuda") != NULL);
  }
  oj_optimizer_destroy(opt);
}

int main(void) {
  const long pid = (long)getpid();
  snprintf(g_path_a, sizeof g_path_a, "c_api_test_%ld_a.safetensors", pid);
  snprintf(g_path_b, sizeof g_path_b, "c_api_test_%ld_b.safetensors", pid);
  snprintf(g_path_json, sizeof g_path_json, "c_api_test_%ld_ds.json", pid);

  test_version();
  test_errors();
  test_muon_step();
  test_adam_step();
  test_tagging_and_skip();
  test_save_load();
  test_save_load_progress();
  test_splits_and_qk_clip();
  test_orthogonalize();
  test_deepspeed_config();
  test_device_memory();
  test_variant_options();

  if (g_failures) {
    fprintf(stderr, "c_api_test: %d of %d checks failed\n", g_failures, g_checks);
    return 1;
  }
  printf("c_api_test: all %d checks passed (orthojit %s, backends %s)\n", g_checks, oj_version(), oj_available_backends());
  return 0;
}
