#!/usr/bin/env bash
# scripts/gpu-kit packs what a lent GPU machine lacks (nlohmann-json; the nanobind the bindings are
# built with) so that scripts/gpu-check builds every part there. Checked here: a kit is written
# with its manifest; a project configures, builds and runs against the kit alone
# (tests/gpu_kit_consumer: nlohmann-json from -Dnlohmann_json_DIR=<kit>/nlohmann_json, a nanobind
# module from PYTHONPATH=<kit>/python, both asserted to come from the kit and not from this
# machine's installs); gpu-check's preflight takes the kit and its plan names it; bad arguments and
# a failed packing leave an earlier kit as it was. Usage: gpu_kit_test.sh SOURCE_DIR PYTHON
set -u
root=$1
python=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# shellcheck source=expect.sh
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

kit=$work/kit
expect 0 "gpu-kit: $kit: nlohmann-json" -- "$root/scripts/gpu-kit" --out "$kit" --python "$python"
json_version=$("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['nlohmann_json']['version'])" "$kit/manifest.json")
nanobind_version=$("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['nanobind']['version'])" "$kit/manifest.json")
[[ -f $kit/nlohmann_json/include/nlohmann/json.hpp && -f $kit/python/nanobind/cmake/nanobind-config.cmake ]] || fail "the kit lacks json.hpp or nanobind's CMake package"

# A project built from the kit alone.
consumer=$work/consumer
if ! PYTHONPATH=$kit/python cmake -S "$root/tests/gpu_kit_consumer" -B "$consumer" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 \
     -DKIT_DIR="$kit" -Dnlohmann_json_DIR="$kit/nlohmann_json" -DPython_EXECUTABLE="$python" > "$work/configure.log" 2>&1; then
  fail "the consumer project did not configure from the kit"; tail -20 "$work/configure.log"
elif ! cmake --build "$consumer" > "$work/build.log" 2>&1; then
  fail "the consumer project did not build from the kit"; tail -30 "$work/build.log"
else
  # The headers the compiler was given are the kit's (searched before the system's /usr/include).
  if ninja -C "$consumer" -t commands kit_json | grep -qF -- "-isystem $kit/nlohmann_json/include"; then
    echo "ok: kit_json compiled with -isystem $kit/nlohmann_json/include"
  else
    fail "kit_json's compile command does not name the kit's include folder"; ninja -C "$consumer" -t commands kit_json | tail -2
  fi
  expect 0 "sum 6.5 version $json_version" -- "$consumer/kit_json" '{"values": [1, 2.5, 3]}'
  expect 0 "15.0" -- env PYTHONPATH="$consumer" "$python" -c "import kit_module; print(kit_module.scaled_sum([1.0, 2.0, 2.0], 3.0))"
fi

# gpu-check takes the kit: the preflight reports it, the nanobind it probes is the kit's, the plan
# passes its nlohmann-json to CMake.
expect 0 "-Dnlohmann_json_DIR=$kit/nlohmann_json" -- "$root/scripts/gpu-check" --dry-run --kit "$kit" --out-dir "$work/dry"
"$python" - "$work/dry/preflight.json" "$kit" "$nanobind_version" <<'PY' || fail "gpu-check's preflight.json does not show the kit"
import json, sys
found, kit, version = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
assert found["kit"]["dir"] == kit, found["kit"]
assert found["nlohmann_json"][0].startswith(kit + "/"), found["nlohmann_json"]
assert found["python"]["nanobind"] == version, found["python"]
assert (found.get("nanobind_cmake_dir") or "").startswith(kit + "/python/"), found.get("nanobind_cmake_dir")
print("ok: preflight.json: the kit, its nlohmann-json and its nanobind")
PY
expect 2 "no readable manifest.json" -- "$root/scripts/gpu-check" --dry-run --kit "$work/no-such-kit" --out-dir "$work/dry2"
mkdir -p "$work/broken" && cp "$kit/manifest.json" "$work/broken/"
expect 2 "names files that are not there (nlohmann-json, nanobind)" -- "$root/scripts/gpu-check" --dry-run --kit "$work/broken" --out-dir "$work/dry3"

# Bad arguments, and nothing lost on failure.
touch "$work/a-file"
expect 2 "exists and is not a folder" -- "$root/scripts/gpu-kit" --out "$work/a-file" --python "$python"
mkdir -p "$work/other" && echo keep > "$work/other/notes.txt"
expect 2 "refusing to replace it" -- "$root/scripts/gpu-kit" --out "$work/other" --python "$python"
[[ $(cat "$work/other/notes.txt") == keep ]] || fail "a refused --out folder was changed"
before=$(cat "$kit/manifest.json")
expect 1 "no nlohmann/json.hpp under $work/empty" -- "$root/scripts/gpu-kit" --out "$kit" --python "$python" --nlohmann-include "$work/empty"
expect 1 "nanobind: no interpreter here imports it" -- "$root/scripts/gpu-kit" --out "$kit" --python /bin/false
[[ $(cat "$kit/manifest.json") == "$before" && -f $kit/nlohmann_json/include/nlohmann/json.hpp ]] || fail "a failed packing changed the earlier kit"
[[ ! -e $kit.partial ]] || fail "a failed packing left $kit.partial behind"

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all gpu-kit checks passed"
