/* One Muon + AdamW step through an installed orthojit's C API: a 16 x 24 matrix and a bias,
   checked against what the step must do (the parameters moved, by at most lr per element for
   Muon's orthogonalized update scaled as the preset scales it). Exits 1 otherwise. */
#include <math.h>
#include <stdio.h>

#include "orthojit/orthojit.h"

int main(void) {
  enum { rows = 16, cols = 24 };
  static float w[rows * cols], gw[rows * cols], w0[rows * cols], b[rows], gb[rows];
  for (int i = 0; i < rows * cols; ++i) {
    w[i] = w0[i] = (float)sin(0.37 * i) * 0.1f;
    gw[i] = (float)cos(0.11 * i);
  }
  for (int i = 0; i < rows; ++i) b[i] = 0.0f, gb[i] = 1.0f;
  oj_optimizer* opt = NULL;
  if (oj_optimizer_create("keller", &opt) != OJ_OK) return fprintf(stderr, "%s\n", oj_last_error()), 1;
  const int64_t w_shape[2] = {rows, cols}, b_shape[1] = {rows};
  if (oj_optimizer_set_option(opt, "muon.lr", "0.02") != OJ_OK ||
      oj_optimizer_add_parameter(opt, "layer.weight", 2, w_shape, OJ_DTYPE_F32, w, OJ_DTYPE_F32, gw, OJ_TAG_AUTO) != OJ_OK ||
      oj_optimizer_add_parameter(opt, "layer.bias", 1, b_shape, OJ_DTYPE_F32, b, OJ_DTYPE_F32, gb, OJ_TAG_AUTO) != OJ_OK)
    return fprintf(stderr, "%s\n", oj_last_error()), 1;
  oj_step_report report;
  if (oj_optimizer_step(opt, &report) != OJ_OK) return fprintf(stderr, "%s\n", oj_last_error()), 1;
  double moved = 0, largest = 0;
  for (int i = 0; i < rows * cols; ++i) {
    moved += fabs((double)w[i] - w0[i]);
    if (fabs((double)w[i] - w0[i]) > largest) largest = fabs((double)w[i] - w0[i]);
  }
  printf("C API: %d Muon and %d AdamW parameters stepped; the matrix moved by %.3g in all, %.3g at most per element\n", (int)report.muon_updated,
         (int)report.adam_updated, moved, largest);
  oj_optimizer_destroy(opt);
  /* keller: p -= lr * sqrt(max(1, rows/cols)) * O with |O_ij| <= 1 (rows < cols here: scale 1) */
  return report.muon_updated == 1 && report.adam_updated == 1 && moved > 0 && largest <= 0.02 * 1.2 ? 0 : 1;
}
