#!/usr/bin/env python3
"""One error classification at the three boundaries (runtime/errors.h): for each kind of error,
a mistake that throws it is made through the CLI (its exit code and the form of its message),
the C API (liborthojit_c.so through ctypes: the status) and the Python extension (the exception
type), and each must give what the kind prescribes:

    kind          CLI exit  CLI message                        C status              Python
    bad input     2         "error: ...(see `orthojit X --help`)" OJ_INVALID_ARGUMENT ValueError
      (located)   2         "orthojit X: FILE:LINE:COL: error: ..."
    unavailable   2         "error: ...(see ...)"              OJ_UNAVAILABLE        ValueError
    i/o           2         "error: ..." (no --help hint)      OJ_IO_ERROR           OSError
    invalid state -                                            OJ_INVALID_STATE      -

The C status numbers are read from include/orthojit/orthojit.h (they are the ABI). A boundary
with no way to make a mistake of a kind is left out of that row ("-").

usage: error_boundaries_test.py ORTHOJIT_CLI LIBORTHOJIT_C SOURCE_DIR   (PYTHONPATH: the extension)
"""
import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

cli, c_library, source_dir = sys.argv[1:4]
from orthojit import _orthojit  # noqa: E402  (PYTHONPATH is the build tree's)

# What each kind means at each boundary: the specification the rows are checked against.
EXIT_CODE = {"bad input": 2, "unavailable": 2, "i/o": 2, "invalid state": 1, "internal": 1}
C_STATUS = {"bad input": "OJ_INVALID_ARGUMENT", "unavailable": "OJ_UNAVAILABLE", "i/o": "OJ_IO_ERROR", "invalid state": "OJ_INVALID_STATE",
            "out of memory": "OJ_OUT_OF_MEMORY", "internal": "OJ_INTERNAL"}
PYTHON_EXCEPTION = {"bad input": ValueError, "unavailable": ValueError, "i/o": OSError, "invalid state": RuntimeError, "internal": RuntimeError}

with open(os.path.join(source_dir, "include/orthojit/orthojit.h"), encoding="utf-8") as header:
    enum = re.search(r"typedef enum oj_status \{(.*?)\} oj_status;", header.read(), re.S).group(1)
STATUS_NUMBER = {name: int(value) for name, value in re.findall(r"(OJ_[A-Z_]+) = (\d+)", enum)}
assert set(C_STATUS.values()) <= set(STATUS_NUMBER), f"oj_status lacks a status: {STATUS_NUMBER}"

lib = ctypes.CDLL(c_library)
lib.oj_last_error.restype = ctypes.c_char_p
lib.oj_optimizer_create.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
lib.oj_optimizer_build.argtypes = [ctypes.c_void_p]
lib.oj_optimizer_set_option.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
lib.oj_optimizer_load_state.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
lib.oj_optimizer_destroy.argtypes = [ctypes.c_void_p]
lib.oj_orthogonalize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                 ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_float)]

work = tempfile.mkdtemp(prefix="orthojit-errors-")
bad_program = os.path.join(work, "bad.oj")
with open(bad_program, "w") as out:
    out.write("program p\n")  # not the header 'orthogonalizer NAME {'
not_npy = os.path.join(work, "not.npy")
not_safetensors = os.path.join(work, "not.safetensors")
for path in (not_npy, not_safetensors):
    with open(path, "wb") as out:
        out.write(b"this is not a file of that format\n")
cuda_runs = json.loads(_orthojit.info())["cuda"]["available"]


def c_orthogonalize(program, backend, strategy):
    values = (ctypes.c_float * (8 * 32))(*np.random.default_rng(0).standard_normal(8 * 32).astype(np.float32))
    result = (ctypes.c_float * (8 * 32))()
    return lib.oj_orthogonalize(program.encode(), backend.encode(), strategy.encode(), 1, 8, 32, values, result)


def c_with_optimizer(action):
    handle = ctypes.c_void_p()
    assert lib.oj_optimizer_create(b"deepspeed", ctypes.byref(handle)) == 0, lib.oj_last_error()
    try:
        return action(handle)
    finally:
        lib.oj_optimizer_destroy(handle)


def c_set_option_after_build(handle):
    assert lib.oj_optimizer_build(handle) == 0, lib.oj_last_error()
    return lib.oj_optimizer_set_option(handle, b"muon.momentum", b"0.9")


def c_load_state_after_build(handle):
    assert lib.oj_optimizer_build(handle) == 0, lib.oj_last_error()
    return lib.oj_optimizer_load_state(handle, not_safetensors.encode())


def python_compile(**kwargs):
    return lambda: _orthojit.compile(_orthojit.load_program("jordan_ns5"), 8, 32, **kwargs)


x = np.random.default_rng(1).standard_normal((8, 32)).astype(np.float32)
# (what is thrown, its kind, located, CLI arguments, C call, Python call)
ROWS = [
    ("runtime::UsageError (an unknown strategy)", "bad input", False,
     ["compile", "--program", "jordan_ns5", "--shape", "8x32", "--strategy", "nope"],
     lambda: c_orthogonalize("jordan_ns5", "ref", "nope"), python_compile(strategy="nope", backend="ref")),
    ("std::invalid_argument (an f64 policy on the cpu backend; an unknown preset; an unknown setting)", "bad input", False,
     ["compile", "--program", "jordan_ns5", "--shape", "8x32", "--precision", "f64", "--backend", "cpu", "--emit", "llvm"],
     lambda: lib.oj_optimizer_create(b"nosuch", ctypes.byref(ctypes.c_void_p())),
     lambda: _orthojit.MuonSettings("deepspeed", {"muon.no_such_setting": 1})),
    ("CompileError (DSL text that does not parse)", "bad input", True,
     ["compile", "--program", bad_program, "--shape", "8x32"],
     lambda: c_orthogonalize(bad_program, "ref", "auto"), lambda: _orthojit.load_program("program p\n")),
    ("NpyError / SafetensorsError (a file that is not of its format)", "i/o", False,
     ["run", "--program", "jordan_ns5", "--input", not_npy, "--output", os.path.join(work, "out.npy")],
     lambda: c_with_optimizer(c_load_state_after_build), None),
    ("runtime::InvalidStateError (an option after build)", "invalid state", False, None,
     lambda: c_with_optimizer(c_set_option_after_build), None),
]
if not cuda_runs:
    ROWS.append(("runtime::UnavailableError (the cuda backend without a usable GPU)", "unavailable", False,
                 ["bench", "--program", "jordan_ns5", "--shape", "8x32", "--backend", "cuda", "--repeat", "1"],
                 lambda: c_orthogonalize("jordan_ns5", "cuda", "standard"), lambda: _orthojit.orthogonalize(x, backend="cuda")))

failures = []
for what, kind, located, arguments, c_call, python_call in ROWS:
    if arguments:
        run = subprocess.run([cli] + arguments, capture_output=True, text=True, timeout=300)
        command = arguments[0]
        if located:
            form = re.compile(rf"^orthojit {command}: \S+:\d+:\d+: error: ")
        elif kind in ("bad input", "unavailable"):
            form = re.compile(rf"^orthojit {command}: error: .*\n\(see `orthojit {command} --help`\)\n\Z", re.S)
        elif EXIT_CODE[kind] == 2:
            form = re.compile(rf"^orthojit {command}: error: (?!.*\(see `)", re.S)
        else:
            form = re.compile(rf"^orthojit {command}: internal error: ")
        if run.returncode != EXIT_CODE[kind] or not form.search(run.stderr):
            failures.append(f"{what}: CLI {' '.join(arguments)}: exit {run.returncode} (expected {EXIT_CODE[kind]} for {kind}), "
                            f"stderr {run.stderr!r} (expected the form {form.pattern!r})")
    if c_call:
        status = c_call()
        expected = STATUS_NUMBER[C_STATUS[kind]]
        if status != expected:
            failures.append(f"{what}: C API status {status} (expected {C_STATUS[kind]} = {expected} for {kind}): {lib.oj_last_error()!r}")
    if python_call:
        try:
            python_call()
            failures.append(f"{what}: Python raised nothing (expected {PYTHON_EXCEPTION[kind].__name__} for {kind})")
        except Exception as error:  # noqa: BLE001  (the type is what is checked)
            if type(error) is not PYTHON_EXCEPTION[kind]:
                failures.append(f"{what}: Python raised {type(error).__name__}: {error} (expected {PYTHON_EXCEPTION[kind].__name__} for {kind})")
    print(f"{'FAIL' if any(f.startswith(what) for f in failures) else 'ok  '} {kind:13} {what}")

for failure in failures:
    print("FAIL:", failure)
sys.exit(1 if failures else 0)
