// Parses its argument with the kit's nlohmann-json and prints the sum of the "values" array and the
// library's version, which tests/gpu_kit_test.sh compares with the kit's manifest.
#include <cstdio>
#include <nlohmann/json.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kit_json '{\"values\": [...]}'\n");
    return 2;
  }
  const nlohmann::json document = nlohmann::json::parse(argv[1]);
  double sum = 0;
  for (const auto& value : document.at("values")) sum += value.get<double>();
  std::printf("sum %g version %d.%d.%d\n", sum, NLOHMANN_JSON_VERSION_MAJOR, NLOHMANN_JSON_VERSION_MINOR, NLOHMANN_JSON_VERSION_PATCH);
  return 0;
}
