#!/usr/bin/env bash
# Installs what orthojit needs to build and test on Debian 12 (bookworm). Idempotent and quiet:
# when everything is present it prints nothing and exits 0. Run by `make demo` and `make test`.
set -euo pipefail

packages=(
  g++ make cmake ninja-build pkg-config    # toolchain
  clang-19 libclang-rt-19-dev              # the libFuzzer targets (make fuzz; tests/fuzz/)
  nlohmann-json3-dev                       # JSON (tuning records, --json output)
  libgtest-dev libgmock-dev                # tests
  libbenchmark-dev                         # bench/
  llvm-19-dev                              # the CPU backend: LLVM IR + ORC JIT (one pinned major)
  libopenblas-dev libdnnl-dev              # CPU baselines in bench/ (OpenBLAS f32, oneDNN bf16)
  python3-numpy                            # tests/npy_interop_test.sh: .npy files written by NumPy itself
  python3-matplotlib                       # `orthojit bench --model ... --plot FILE.png`
  libopenmpi-dev openmpi-bin               # the distributed optimizer's MPI engine and its mpirun tests
  python3-dev python3-pip python3-pytest   # the Python bindings (built with nanobind from PyPI, tested with pytest)
  python3-venv                             # tests/pip_install_test.sh: `pip install .` into a fresh environment
  python3-torch                            # PyTorch (CPU) for orthojit.Muon and its tests
  python3-mpi4py                           # orthojit.DistributedMuon takes an mpi4py communicator (its tests)
)

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$package")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "orthojit: installing missing Debian packages: ${missing[*]}"
  if [[ $(id -u) -eq 0 ]]; then
    sudo=()
  elif command -v sudo >/dev/null; then
    sudo=(sudo)
  else
    echo "orthojit: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "orthojit: installed ${missing[*]}"
fi

# nanobind (the Python bindings' binding library) is not packaged by Debian 12: from PyPI, for
# Debian's python3 (the one with python3-numpy and python3-torch).
if ! /usr/bin/python3 -c "import nanobind" 2>/dev/null; then
  echo "orthojit: installing nanobind from PyPI for /usr/bin/python3"
  pip_user=()
  [[ $(id -u) -eq 0 ]] || pip_user=(--user)
  /usr/bin/python3 -m pip install -q --break-system-packages "${pip_user[@]}" "nanobind>=2.0" >/dev/null
fi

# cuobjdump and nvdisasm for the SASS checks of the generated CUDA (tests/cuda_sass_test.cpp), from
# PyPI when the toolkit has none; without a network the test says where it looked and skips.
if command -v nvcc >/dev/null 2>&1 || [[ -n "${CUDA_HOME:-}" ]]; then
  toolkit_bin="${CUDA_HOME:-/usr/local/cuda}/bin"
  if [[ ! -x "$toolkit_bin/cuobjdump" || ! -x "$toolkit_bin/nvdisasm" ]] &&
     ! /usr/bin/python3 -c 'import nvidia, os, sys; d = os.path.join(list(nvidia.__path__)[0], "cu13", "bin"); sys.exit(0 if os.path.exists(os.path.join(d, "cuobjdump")) and os.path.exists(os.path.join(d, "nvdisasm")) else 1)' 2>/dev/null; then
    echo "orthojit: installing cuobjdump and nvdisasm from PyPI for /usr/bin/python3 (SASS checks)"
    pip_user=()
    [[ $(id -u) -eq 0 ]] || pip_user=(--user)
    /usr/bin/python3 -m pip install -q --break-system-packages "${pip_user[@]}" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm >/dev/null ||
      echo "orthojit: could not install nvidia-cuda-cuobjdump/nvdisasm (no network?): tests/cuda_sass_test.cpp will skip"
  fi
fi
