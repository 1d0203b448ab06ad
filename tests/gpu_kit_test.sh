#!/usr/bin/env bash
# scripts/gpu-kit packs what a lent GPU machine lacks (nlohmann-json; the nanobind the bindings are
# built with) so that scripts/gpu-check builds every part there. Checked here: a kit is written
# with its manifest; a project configures, builds and runs against the kit alone
# (tests/gpu_kit_consumer: nlohmann-json from -Dnlohmann_json_DIR=<kit>/nlohmann_json, a nanobind
# module from PYTHONPATH=<kit>/python, both asserted to come from the kit and not from this
# machine's installs); gpu-check's preflight takes the kit and its plan names it; bad arguments and
# a failed packing leave an earlier kit as it was. The CUDA program cache (--cuda-cache), with
# stand-ins for the two binaries that compile it: packed with its manifest entry, a failed compile
# fails the kit and keeps the earlier one, and gpu-check unpacks only cuda/<key>.ojbin files into
# ORTHOJIT_CACHE_DIR before its build. Usage: gpu_kit_test.sh SOURCE_DIR PYTHON
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
expect 0 "gpu-kit: $kit: nlohmann-json" -- "$root/scripts/gpu-kit" --out "$kit" --python "$python" --cuda-cache none
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
expect 2 "exists and is not a folder" -- "$root/scripts/gpu-kit" --out "$work/a-file" --python "$python" --cuda-cache none
mkdir -p "$work/other" && echo keep > "$work/other/notes.txt"
expect 2 "refusing to replace it" -- "$root/scripts/gpu-kit" --out "$work/other" --python "$python" --cuda-cache none
[[ $(cat "$work/other/notes.txt") == keep ]] || fail "a refused --out folder was changed"
before=$(cat "$kit/manifest.json")
expect 1 "no nlohmann/json.hpp under $work/empty" -- "$root/scripts/gpu-kit" --out "$kit" --python "$python" --nlohmann-include "$work/empty" --cuda-cache none
expect 1 "nanobind: no interpreter here imports it" -- "$root/scripts/gpu-kit" --out "$kit" --python /bin/false --cuda-cache none
[[ $(cat "$kit/manifest.json") == "$before" && -f $kit/nlohmann_json/include/nlohmann/json.hpp ]] || fail "a failed packing changed the earlier kit"
[[ ! -e $kit.partial ]] || fail "a failed packing left $kit.partial behind"

# The CUDA program cache, compiled by stand-ins for cuda_device_test and orthojit_gpu_bench that
# write into $ORTHOJIT_CACHE_DIR/cuda what the real ones would (files named by 64-hex keys).
stub=$work/stub-build
mkdir -p "$stub/bin"
key() { printf '%064x' "$1"; }
cat > "$stub/bin/cuda_device_test" <<STUB
#!/bin/sh
[ "\$1 \$2" = "--host-only sm_90" ] || { echo "stand-in: unexpected arguments \$*"; exit 2; }
[ -z "\$ORTHOJIT_CUDA_SM_COUNT" ] || { echo "stand-in: ORTHOJIT_CUDA_SM_COUNT=\$ORTHOJIT_CUDA_SM_COUNT reached the prewarm"; exit 2; }
mkdir -p "\$ORTHOJIT_CACHE_DIR/cuda"
if [ "\$3" = "--one-sm" ]; then
  echo four > "\$ORTHOJIT_CACHE_DIR/cuda/$(key 4).ojbin"
  echo "  host phase: 1/1 cases, programs compiled 1, from the disk cache 0, already loaded 0 (1 s)"
  exit 0
fi
echo one > "\$ORTHOJIT_CACHE_DIR/cuda/$(key 1).ojbin"; echo two > "\$ORTHOJIT_CACHE_DIR/cuda/$(key 2).ojbin"
echo "not a program" > "\$ORTHOJIT_CACHE_DIR/cuda/notes.txt"
echo "  host phase: 2/2 cases, programs compiled 2, from the disk cache 0, already loaded 0 (1 s)"
[ -n "\$STUB_FAIL" ] && { echo "FAIL jordan_ns5 standard bf16 64x64x1 [default]: host phase: NVRTC said no"; exit 1; }
exit 0
STUB
cat > "$stub/bin/orthojit_gpu_bench" <<STUB
#!/bin/sh
[ "\$1 \$2" = "--prewarm sm_90" ] || { echo "stand-in: unexpected arguments \$*"; exit 2; }
echo three > "\$ORTHOJIT_CACHE_DIR/cuda/$(key 3).ojbin"
echo "prewarmed 1 variants of 1 cases for sm_90 in 0.1 s (0 failed)"
STUB
printf '#!/bin/sh\necho "nvrtc:      13.0 (a stand-in)"\n' > "$stub/bin/orthojit"
chmod +x "$stub/bin/"*
cached=$work/cached-kit
# (ORTHOJIT_CUDA_SM_COUNT set by the user must not reach the prewarm: the main check's programs are
# for the whole device; the stand-in refuses it.)
expect 0 "4 CUDA programs for sm_90 (NVRTC 13.0" -- env ORTHOJIT_CUDA_SM_COUNT=7 "$root/scripts/gpu-kit" --out "$cached" --python "$python" --build-dir "$stub"
"$python" - "$cached" <<'PY' || fail "the cached kit's manifest or archive is not what the stand-ins compiled"
import json, sys, tarfile
kit = sys.argv[1]
cache = json.load(open(kit + "/manifest.json"))["cuda_cache"]
assert cache["programs"] == 4 and cache["target"] == "sm_90" and cache["nvrtc"] == "13.0", cache
names = sorted(tarfile.open(kit + "/" + cache["file"]).getnames())
assert [n for n in names if n.endswith(".ojbin")] == ["cuda/%064x.ojbin" % i for i in (1, 2, 3, 4)], names
print("ok: manifest cuda_cache", cache["programs"], "programs;", len(names), "archive entries")
PY
[[ ! -e $cached/cuda-cache.work ]] || fail "the kit kept its uncompressed cache folder"
before=$(cat "$cached/manifest.json")
expect 1 "cuda_device_test exit 1 (1 FAIL lines, first: FAIL jordan_ns5" -- env STUB_FAIL=1 "$root/scripts/gpu-kit" --out "$cached" --python "$python" --build-dir "$stub"
[[ $(cat "$cached/manifest.json") == "$before" && -f $cached/cuda-cache.tar.xz ]] || fail "a failed compile changed the earlier kit"
expect 1 "not built" -- "$root/scripts/gpu-kit" --out "$work/kit-none" --python "$python" --build-dir "$work/empty" --cuda-cache sm_90
expect 2 "expected a compute capability" -- "$root/scripts/gpu-kit" --out "$work/kit-none" --python "$python" --cuda-cache 90

# gpu-check unpacks the programs before its build, only the cuda/<key>.ojbin files, into
# ORTHOJIT_CACHE_DIR (by default <build>/cache), and says so in its summary. Here a configure that
# says nlohmann-json is missing, then fails its CUDA-only retry too: the retry's fresh configure
# must not take the unpacked programs with it.
mkdir -p "$work/fake-cmake"
cat > "$work/fake-cmake/cmake" <<'CMAKE'
#!/bin/sh
if [ "$1" = "--version" ]; then echo "cmake version 3.99.0 (a stand-in)"; exit 0; fi
case "$*" in
  *ORTHOJIT_CUDA_ONLY=ON*) echo "stand-in cmake: no CUDA-only configure either"; exit 1 ;;
  *) echo 'CMake Error at CMakeLists.txt:61 (find_package):'; echo '  Could not find a package configuration file provided by "nlohmann_json"'; exit 1 ;;
esac
CMAKE
chmod +x "$work/fake-cmake/cmake"
env -u ORTHOJIT_CACHE_DIR PATH="$work/fake-cmake:$PATH" "$root/scripts/gpu-check" --host-only --kit "$cached" --budget 120 \
  --build-dir "$work/gc-build" --out-dir "$work/gc-out" > "$work/gc.log" 2>&1
"$python" - "$work/gc-out/summary.json" "$work/gc-build/cache/cuda" <<'PY' || { fail "gpu-check did not unpack the kit's programs, or lost them"; tail -20 "$work/gc.log"; }
import json, os, sys
phases = {p["phase"]: p for p in json.load(open(sys.argv[1]))["phases"]}
entry = phases.get("cuda-cache", {})
assert entry.get("status") == "ok" and entry["message"].startswith("4 programs for sm_90"), entry
files = sorted(os.listdir(sys.argv[2]))
assert files == ["%064x.ojbin" % i for i in (1, 2, 3, 4)], files
assert phases["build"]["status"] == "failed", phases["build"]
print("ok: gpu-check unpacked", len(files), "programs, not notes.txt")
PY

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all gpu-kit checks passed"
