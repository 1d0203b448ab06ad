#!/usr/bin/env bash
# The parts of a build (cmake/optional_parts.cmake): `orthojit info` names each part built or not
# and why, every part that is built works, and every part left out fails with a message that says
# why and what to use instead (exit 2, a usage error). Registered in every build that has the CLI:
# the full one (every part present and working) and CI's build-minimal, configured like the GPU
# machines' build (no LLVM, OpenBLAS, MPI; the CUDA backend on). Needs only bash and python3 (no
# NumPy: the GPU machines' system python may lack it). Usage: build_parts_test.sh path/to/orthojit
set -u
orthojit=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# shellcheck source=expect.sh
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

# The parts as "name=1|0" lines, from the JSON document (python3's json module, no NumPy).
"$orthojit" info --json >"$work/info.json" || { echo "FAIL: orthojit info --json exited $?"; exit 1; }
python3 - "$work/info.json" >"$work/parts" <<'PY' || { echo "FAIL: orthojit info --json is not the expected document"; exit 1; }
import json, sys
info = json.load(open(sys.argv[1]))
for part in info["parts"]:
    assert isinstance(part["built"], bool) and part["detail"], part
    print(f'{part["name"].replace(" ", "_")}={int(part["built"])}')
assert info["backends"][0] == "ref", info["backends"]
PY
built() { grep -qx "$1=1" "$work/parts"; }
# auto_backend NAME: the backend "auto" resolves to for a bf16 program (bench's default backend).
auto_backend() {
  local got
  got=$("$orthojit" bench --program jordan_ns5 --shape 8x24 --repeat 1 --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["backend"])')
  if [[ "$got" == "$1" ]]; then echo "ok: backend auto runs bf16 on $1"; else echo "FAIL: backend auto ran bf16 on '$got', expected $1"; failures=$((failures + 1)); fi
}
for part in ref_backend cpu_backend openblas cuda_backend nccl_engine mpi_engine c_api python_extension; do
  grep -q "^$part=" "$work/parts" || { echo "FAIL: orthojit info --json has no part '$part'"; failures=$((failures + 1)); }
done
echo "parts: $(tr '\n' ' ' <"$work/parts")"
expect 0 "parts:" -- "$orthojit" info
built ref_backend || { echo "FAIL: the reference backend is always built"; failures=$((failures + 1)); }
built c_api || { echo "FAIL: the C API is always built"; failures=$((failures + 1)); }

# An 8x24 float32 .npy written with the struct module.
python3 - "$work/g.npy" <<'PY'
import random, struct, sys
random.seed(3)
rows, cols = 8, 24
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, cols)
header += " " * (63 - (10 + len(header)) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<%df" % (rows * cols), *[random.gauss(0, 1) for _ in range(rows * cols)]))
PY

# The reference backend and the commands that need no optional part.
expect 0 "backend ref" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/ref.npy" --backend ref --verbose
[[ -s "$work/ref.npy" ]] && echo "ok: ref output written" || { echo "FAIL: no ref output"; failures=$((failures + 1)); }
expect 0 "backend ref" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/f64.npy" --precision f64 --verbose
expect 0 "gemm" -- "$orthojit" compile --program polar_express5 --shape 8x32 --strategy gram --emit ir
expect 0 "ZeRO-2" -- "$orthojit" plan --model default --world 2 --stage 2

# The CPU backend (LLVM 19).
if built cpu_backend; then
  expect 0 "backend cpu" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/cpu.npy" --backend cpu --verbose
  expect 0 "microkernel" -- "$orthojit" compile --program jordan_ns5 --shape 8x32 --backend cpu --emit llvm
  auto_backend cpu
else
  why="this build has no CPU backend ("
  expect 2 "$why" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/cpu.npy" --backend cpu
  expect 2 "use backend ref or cuda" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/cpu.npy" --backend cpu
  expect 2 "$why" -- "$orthojit" compile --program jordan_ns5 --shape 8x32 --backend cpu --emit llvm
  expect 2 "$why" -- "$orthojit" tune --shape 64x128 --budget 1
  expect 2 "$why" -- "$orthojit" bench --model default --budget 1
  # auto runs every storage on the reference interpreter instead.
  auto_backend ref
  expect 0 "cpu columns: $why" -- "$orthojit" demo --shape 16x48
  built openblas && { echo "FAIL: openblas without the cpu backend is not a configuration CI builds"; failures=$((failures + 1)); }
fi

# The CUDA backend: code generation and NVRTC need no GPU; running needs a device.
if built cuda_backend; then
  expect 0 "registers" -- "$orthojit" compile --program jordan_ns5 --shape 64x256 --backend cuda --emit cuda --arch sm_90
  if ! "$orthojit" info | grep -q "^backends:.*cuda"; then
    expect 2 "--backend cuda: " -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/cuda.npy" --backend cuda
  fi
else
  expect 2 "CUDA toolkit was not found" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/cuda.npy" --backend cuda
fi

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "build_parts_test: all checks passed"
