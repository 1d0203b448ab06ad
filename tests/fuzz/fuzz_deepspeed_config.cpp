// Fuzz target: the DeepSpeed configuration reader (runtime::parse_deepspeed_config_text, what
// load_deepspeed_config runs on a file's text), lenient and strict. Every input is a
// configuration or a DeepSpeedConfigError; a strict read that succeeds must agree with the
// lenient one and leave no key ignored.
#include <string>

#include "fuzz_target.h"
#include "runtime/muon/deepspeed_config.h"

namespace rt = orthojit::runtime;

ORTHOJIT_FUZZ_TARGET(deepspeed_config) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  bool lenient_ok = false;
  rt::DeepSpeedConfig lenient;
  try {
    lenient = rt::parse_deepspeed_config_text(text, "fuzz-ds.json", false);
    lenient_ok = true;
    fuzz_check(lenient.zero.stage >= 0 && lenient.zero.stage <= 3, "accepted ZeRO stage " + std::to_string(lenient.zero.stage));
  } catch (const rt::DeepSpeedConfigError&) {
  } catch (const std::exception& error) {
    fuzz_failure(std::string("the DeepSpeed reader threw something other than DeepSpeedConfigError: ") + error.what());
  }
  try {
    const rt::DeepSpeedConfig strict = rt::parse_deepspeed_config_text(text, "fuzz-ds.json", true);
    fuzz_check(lenient_ok, "the strict read accepted what the lenient one refused");
    fuzz_check(strict.ignored_keys.empty(), "the strict read ignored a key");
    fuzz_check(strict.zero.stage == lenient.zero.stage && strict.auto_keys == lenient.auto_keys, "the strict and lenient reads disagree");
  } catch (const rt::DeepSpeedConfigError&) {
  } catch (const std::exception& error) {
    fuzz_failure(std::string("the strict DeepSpeed reader threw something other than DeepSpeedConfigError: ") + error.what());
  }
  return 0;
}
