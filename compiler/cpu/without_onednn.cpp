// The oneDNN engine in a build without oneDNN (libdnnl-dev not found, or the vendor part off):
// the declarations of vendor_gemm.h; the tuner prunes the onednn candidates with the reason below,
// and a hand-made option that reaches a product gets PartNotBuilt.
#include "cpu/build_status.h"
#include "cpu/vendor_gemm.h"

namespace orthojit::cpu {

void run_onednn_product(const GemmProblem&, ThreadPool*) { throw PartNotBuilt(onednn_unavailable_reason(ScalarType::BF16)); }

std::string onednn_unavailable_reason(ScalarType) {
  return std::string("this build has no oneDNN (") + ORTHOJIT_ONEDNN_ABSENT_REASON + "): the tuner's onednn candidates are left out";
}

std::string onednn_description() { return "(not built)"; }

}  // namespace orthojit::cpu
