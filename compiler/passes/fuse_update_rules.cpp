// Pass: the Muon step's element-wise ends fused into the iteration's first and last kernels.
//
// * momentum into its normalize: the norm's reduction computes M and U as it reads g and M and
//   writes M back; the scaling pass recomputes U from g and the new M (the same bits), so U is
//   never stored. A Muon step therefore reads g twice and M once and writes M once before the
//   first product, where the unfused form adds a momentum pass and a stored U.
// * update into the producer of the last X (a product or a lincomb): its epilogue rounds the value
//   to X's storage type as before and then writes p ← p·decay − step·X into the parameter, so the
//   last X needs no buffer and there is no output pass. `fuse_update` false (the CPU backend,
//   whose products' epilogues are JIT-compiled without the parameter) keeps the update as its
//   own pass over the stored X.
#include "passes/passes.h"

namespace orthojit::passes {
namespace {

ir::NodeId storage_root(const ir::Function& function, ir::NodeId id) {
  while (function.node(id).kind == ir::OpKind::Transpose) id = function.node(id).operands[0];
  return id;
}

}  // namespace

void fuse_update_rules(ir::Function& function, bool fuse_update) {
  if (!function.muon_step) return;
  const auto users = ir::compute_users(function);
  for (size_t i = 0; i < function.nodes.size(); ++i) {
    ir::Node& node = function.nodes[i];
    if (node.kind == ir::OpKind::Momentum) {
      const auto& mine = users[i];
      node.fused = mine.size() == 1 && function.node(mine[0]).kind == ir::OpKind::Normalize;
    }
    if (node.kind == ir::OpKind::Update && fuse_update) {
      // Fusable when the last X is made by a product or lincomb used by nothing but this update
      // (through the orientation's transpose): then nothing else needs it stored.
      const ir::NodeId root = storage_root(function, node.operands[0]);
      const ir::OpKind kind = function.node(root).kind;
      bool only_user = true;
      for (ir::NodeId id = node.operands[0]; id != root; id = function.node(id).operands[0])
        only_user &= users[static_cast<size_t>(id)].size() == 1;
      only_user &= users[static_cast<size_t>(root)].size() == 1;
      node.fused = only_user && (kind == ir::OpKind::Gemm || kind == ir::OpKind::LinComb) && !function.node(root).symmetric;
    }
  }
}

}  // namespace orthojit::passes
