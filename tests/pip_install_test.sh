#!/bin/sh
# `pip install <source>` into a fresh virtual environment, as docs/python.md tells a user to, then
# the installed package (not the build tree) imported from outside the source tree and run. What
# it catches: pyproject.toml and the CMake install rules disagreeing (pip's build builds only the
# extension, so a `cmake --install` rule for anything else fails the install: it did, before the
# Python files got their own install component), a package file missing from the wheel, an
# extension that imports in the build tree only, C/C++ package files spilling into site-packages.
# Slow (pip's build compiles the core: ~6 min on 2 cores), so it runs alone (RUN_SERIAL).
# usage: pip_install_test.sh <source dir> <work dir> <python>
set -eu
source=$1 work=$2 python=$3
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd) source=$(cd "$source" && pwd)
# --system-site-packages: NumPy and PyTorch from the system (Debian's python3-numpy and
# python3-torch), as most users have them already; pip fetches the build requirements
# (scikit-build-core, nanobind) from PyPI into its isolated build environment.
"$python" -m venv --system-site-packages "$work/venv"
venv_python=$work/venv/bin/python
if ! "$venv_python" -m pip install --disable-pip-version-check "$source" > "$work/pip.log" 2>&1; then
  tail -n 40 "$work/pip.log"
  echo "FAIL: pip install $source (the whole log: $work/pip.log)"
  exit 1
fi
site=$("$venv_python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
# The package holds the extension and every Python file of bindings/python/orthojit, and nothing
# of the C/C++ package (libraries, headers, the program) lands in the environment.
for file in "$source"/bindings/python/orthojit/*.py "$source"/bindings/python/orthojit/py.typed; do
  name=$(basename "$file")
  cmp -s "$file" "$site/orthojit/$name" || { echo "FAIL: $site/orthojit/$name is missing or differs from $file"; exit 1; }
done
cmp -s "$source/runtime/charts/speedup_chart.py" "$site/orthojit/_speedup_chart.py" || { echo "FAIL: $site/orthojit/_speedup_chart.py is missing"; exit 1; }
ls "$site"/orthojit/_orthojit*.so > /dev/null || { echo "FAIL: no extension module in $site/orthojit"; exit 1; }
spilled=$(find "$work/venv" \( -name 'liborthojit*' -o -name 'orthojit.h' -o -name 'orthojitConfig.cmake' -o -path '*/bin/orthojit' \) -print)
[ -z "$spilled" ] || { echo "FAIL: the C/C++ package's files were installed by pip: $spilled"; exit 1; }
# Run from an empty folder, so that nothing of the source or build tree can be imported.
mkdir -p "$work/elsewhere"
cd "$work/elsewhere"
PYTHONPATH= "$venv_python" - "$site" <<'EOF'
import os, sys
import numpy as np
import orthojit
site = sys.argv[1]
assert os.path.dirname(orthojit.__file__) == os.path.join(site, "orthojit"), f"imported {orthojit.__file__}, not the installed package"
# The JIT runs in the installed module: Newton-Schulz keeps the singular vectors, so with G = U S V^T
# the output O has U^T O V diagonal (an SVD, independent of orthojit). f32 products of a 96x160
# matrix: the off-diagonal part is ~1e-6 of the diagonal's; a wrong kernel (or one not compiled for
# this shape) gives O(1). jordan_ns5's singular values end in about [0.68, 1.13] (Keller Jordan's
# coefficients), so the diagonal is bounded too.
rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
g = rng.standard_normal((96, 160), dtype=np.float32)
o = orthojit.orthogonalize(g, program="jordan_ns5", precision="f32", backend="cpu")
u, _, vt = np.linalg.svd(g.astype(np.float64), full_matrices=False)
d = u.T @ o.astype(np.float64) @ vt.T
off = d - np.diag(np.diag(d))
ratio = np.linalg.norm(off) / np.linalg.norm(np.diag(d))
assert ratio < 1e-4, f"U^T O V is not diagonal: off/diag = {ratio:.3g}"
assert 0.6 < np.diag(d).min() and np.diag(d).max() < 1.2, f"singular values {np.diag(d).min():.3g}..{np.diag(d).max():.3g}"
info = orthojit.info()
print(f"pip_install_test: orthojit {info['version']} from {orthojit.__file__}; off/diag {ratio:.2e}")
try:
    import torch
except ImportError:
    torch = None
if torch is not None:  # the optimizer through the installed package (torch from the system)
    layer = torch.nn.Linear(64, 32)
    before = layer.weight.detach().clone()
    opt = orthojit.Muon(layer.named_parameters(), lr=0.02)
    layer(torch.randn(8, 64)).square().sum().backward()
    opt.step()
    assert not torch.equal(before, layer.weight.detach()), "the Muon step changed nothing"
    print(f"pip_install_test: orthojit.Muon stepped with torch {torch.__version__}")
EOF
echo "pip_install_test: OK ($work)"
