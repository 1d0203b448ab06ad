// The sm_90a product tile on a device (cuda_device_hopper_products.h).
#include "cuda_device_hopper_products.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "cuda/program_cache.h"
#include "cuda/cuda_driver.h"
#include "cuda/hopper_product.h"
#include "cuda/sm90a_switch.h"
#include "cuda/sticky_error.h"
#include "hopper_product_reference.h"
#include "support/bf16_bits.h"

namespace orthojit::device_test {
namespace {

struct ProductCase {
  int64_t m, n, k;
  bool b_mn_major;  // 128x128: with f32 D unless bf16_d; the K-major cases have bf16 D
  float alpha, beta, gamma;
  bool wide = false;    // the 128x256 tile (bf16 D either way)
  bool bf16_d = false;  // an MN-major 128x128 case with bf16 D (as orthojit_gpu_bench times it)
};

cuda::HopperProductSpec spec_of(const ProductCase& c) {
  return {c.b_mn_major, c.b_mn_major && !c.wide && !c.bf16_d ? ScalarType::F32 : ScalarType::BF16, c.beta != 0, c.wide};
}

// The cases, every spec of the tile that a device run uses among them: orthojit_gpu_bench's four
// 8192³ rate kernels (D = A·B in bf16, K- or MN-major B, 128 or 256 wide) included, so that the
// rates it reports are of kernels checked here (and compiled into scripts/gpu-kit's cache).
const ProductCase kCases[] = {
    {128, 128, 64 * 9, false, 1.0f, 0.0f, 0.0f},      // 9 K tiles: three rounds of the 4 stages
    {200, 135, 104, false, 0.75f, -0.5f, 0.25f},     // ragged M, N (odd), K, with C and γ
    {130, 248, 320, true, 1.0f, 0.5f, 0.0f},         // MN-major B, f32 D
    {1024, 4096, 1024, true, 1.0f, -0.5f, 0.0f},     // B·X of Newton–Schulz at 1024x4096
    {1024, 1024, 4096, false, 1.0f, 0.0f, 0.0f},     // X·Xᵀ (K-major B = X's rows)
    {1024, 2048, 1024, true, 1.0f, 0.0f, 0.0f, false, true},  // MN-major B, bf16 D, no C: the benchmark's MN-major rate kernel
    // The 128x256 tile: ragged with C and γ (K-major B), B·X at 1024x4096 (MN-major B), 8192
    // columns of K-major B over several items per CTA, and K-major B without C (the benchmark's).
    {300, 440, 200, false, 0.5f, 1.5f, 0.75f, true},
    {1024, 4096, 1024, true, 1.0f, 0.0f, 0.0f, true},
    {2048, 8192, 512, false, 1.0f, -0.5f, 0.0f, true},
    {1024, 2048, 1024, false, 1.0f, 0.0f, 0.0f, true},
};

std::string case_name(const ProductCase& c) {
  return "hopper product " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + " " + spec_of(c).kernel_name();
}

HopperOutcome run_case(const ProductCase& c, const cuda::NamedSources& headers, std::mt19937& random) {
  const cuda::HopperProductSpec spec = spec_of(c);
  const bool f32_d = spec.d_type == ScalarType::F32;
  HopperOutcome outcome;
  outcome.name = case_name(c);
  std::normal_distribution<float> gaussian;
  // C's and D's rows 16-byte aligned (TMA), D's with at least 8 poisoned columns each.
  const int64_t element = f32_d ? 4 : 2, ldc = (c.n + 7) / 8 * 8, ldd = ldc + 8;
  std::vector<uint16_t> a(static_cast<size_t>(c.m * c.k)), b(static_cast<size_t>(c.k * c.n)), cm(static_cast<size_t>(c.m * ldc));
  for (auto* v : {&a, &b, &cm})
    for (auto& x : *v) x = bf16_bits_of(gaussian(random));
  static std::map<std::string, std::unique_ptr<cuda::HopperProduct>> kernels;
  auto& kernel_slot = kernels[spec.kernel_name()];
  if (!kernel_slot) kernel_slot = std::make_unique<cuda::HopperProduct>(spec, headers);
  const cuda::HopperProduct& kernel = *kernel_slot;
  cuda::DeviceBuffer da(c.m * c.k * 2), db(c.k * c.n * 2), dc(c.m * ldc * 2), dd(c.m * ldd * element);
  da.upload(a.data(), da.bytes());
  db.upload(b.data(), db.bytes());
  dc.upload(cm.data(), dc.bytes());
  const auto& api = cuda::Device::get().api();
  cuda::check(api.cuMemsetD8Async(dd.get(), 0xff, static_cast<size_t>(dd.bytes()), nullptr), "poisoning D");
  kernel.run(da.get(), db.get(), spec.has_c ? dc.get() : 0, dd.get(), c.m, c.n, c.k, ldc, ldd, c.alpha, c.beta, c.gamma, nullptr);
  cuda::check(api.cuCtxSynchronize(), outcome.name);
  std::vector<unsigned char> d(static_cast<size_t>(dd.bytes()));
  dd.download(d.data(), dd.bytes());
  const ProductProblem problem{c.m, c.n, c.k, c.b_mn_major, c.alpha, c.beta, c.gamma};
  const ProductCheck check = check_product_against_f64(problem, a, b, cm, ldc, d.data(), ldd, f32_d);
  const int64_t bad = check.bad, red_zone = check.red_zone;
  outcome.worst = check.worst;
  outcome.message = check.first_bad;
  if (red_zone > 0) outcome.message += (outcome.message.empty() ? "" : "; ") + std::to_string(red_zone) + " red-zone elements written";
  if (bad > 1) outcome.message += " (" + std::to_string(bad) + " elements out of bounds)";
  outcome.ok = bad == 0 && red_zone == 0;
  return outcome;
}

}  // namespace

std::vector<HopperOutcome> check_hopper_products(int device_sm, bool host_only, const cuda::NamedSources& headers, std::string& skipped_reason,
                                                 CaseLog& log, uint64_t seed) {
  std::vector<HopperOutcome> outcomes;
  if (const std::string off = cuda::sm90a_disabled_reason(); !off.empty()) {
    skipped_reason = "the sm_90a product tile is turned off by " + off;
    return outcomes;
  }
  if (host_only) {
    std::vector<std::string> compiled;  // each spec once
    for (const ProductCase& c : kCases) {
      const cuda::HopperProductSpec spec = spec_of(c);
      if (std::find(compiled.begin(), compiled.end(), spec.kernel_name()) != compiled.end()) continue;
      compiled.push_back(spec.kernel_name());
      HopperOutcome outcome;
      outcome.name = "hopper product " + spec.kernel_name() + " (NVRTC sm_90a)";
      log.begin(outcome.name);
      try {
        cuda::ProgramCache::process_default().get_or_compile(cuda::hopper_product_source(spec), headers, "sm_90a");  // as HopperProduct does
        outcome.ok = true;
      } catch (const std::exception& error) {
        outcome.message = error.what();
      }
      std::printf("%s %s%s%s\n", outcome.ok ? "READY" : "FAIL", outcome.name.c_str(), outcome.message.empty() ? "" : ": ", outcome.message.c_str());
      log.finish({outcome.name, outcome.ok, outcome.message, ""});
      outcomes.push_back(outcome);
    }
    return outcomes;
  }
  if (device_sm != 90) {
    skipped_reason = "the sm_90a product tile needs compute capability 9.0 (this device: sm_" + std::to_string(device_sm) + ")";
    return outcomes;
  }
  std::mt19937 random(static_cast<std::mt19937::result_type>(seed ^ (seed >> 32)));
  std::printf("hopper products: seed %llu\n", static_cast<unsigned long long>(seed));
  for (const ProductCase& c : kCases) {
    HopperOutcome outcome;
    const std::string name = case_name(c);
    std::string sticky;  // the context's sticky error after a failure (cuda/sticky_error.h)
    log.begin(name);
    try {
      outcome = run_case(c, headers, random);
      if (!outcome.ok) sticky = cuda::poisoned_context_reason();
    } catch (const std::exception& error) {
      outcome.name = name;
      outcome.message = error.what();
      sticky = cuda::sticky_error_after(error);
    }
    std::printf("%s %-70s worst error/bound %.3f%s%s\n", outcome.ok ? "PASS" : "FAIL", outcome.name.c_str(), outcome.worst, outcome.message.empty() ? "" : ": ",
                outcome.message.c_str());
    log.finish({name, outcome.ok, outcome.message, ", \"worst_error_over_bound\": " + json_number(outcome.worst)});
    log.stop_if_sticky(name, sticky);
    outcomes.push_back(outcome);
  }
  return outcomes;
}

}  // namespace orthojit::device_test
