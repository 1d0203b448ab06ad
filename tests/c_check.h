/* The checks of the C tests of the C API (c_api_test.c, c_api_distributed_test.c): each failed
 * check prints where and what, and the test's main exits 1 when any failed; and their
 * deterministic values. One translation unit per test, so the counters and the generator's state
 * are its own. */
#ifndef ORTHOJIT_TESTS_C_CHECK_H
#define ORTHOJIT_TESTS_C_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "orthojit/orthojit.h"

static int g_failures = 0;
static int g_checks = 0;

#define CHECK(condition)                                                                  \
  do {                                                                                    \
    ++g_checks;                                                                           \
    if (!(condition)) {                                                                   \
      ++g_failures;                                                                       \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition);       \
    }                                                                                     \
  } while (0)

/* A call that must succeed; on failure prints the status and the last error. */
#define CHECK_OK(call)                                                                                         \
  do {                                                                                                         \
    oj_status status_ = (call);                                                                                \
    ++g_checks;                                                                                                \
    if (status_ != OJ_OK) {                                                                                    \
      ++g_failures;                                                                                            \
      fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #call, oj_status_name(status_), oj_last_error()); \
    }                                                                                                          \
  } while (0)

/* A call that must fail with `expected`, with a last-error message containing `fragment`. */
#define CHECK_FAILS(call, expected, fragment)                                                                     \
  do {                                                                                                            \
    oj_status status_ = (call);                                                                                   \
    ++g_checks;                                                                                                   \
    if (status_ != (expected)) {                                                                                  \
      ++g_failures;                                                                                               \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s (last error: %s)\n", __FILE__, __LINE__, #call,         \
              oj_status_name(status_), oj_status_name(expected), oj_last_error());                                \
    } else if (strstr(oj_last_error(), (fragment)) == NULL) {                                                    \
      ++g_failures;                                                                                               \
      fprintf(stderr, "%s:%d: %s: the message \"%s\" does not mention \"%s\"\n", __FILE__, __LINE__, #call,      \
              oj_last_error(), (fragment));                                                                       \
    }                                                                                                             \
  } while (0)

/* Deterministic values in [-1, 1) (xorshift64); a test may reseed g_rng. */
static uint64_t g_rng = 0x9E3779B97F4A7C15u;
static float uniform(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

#endif
