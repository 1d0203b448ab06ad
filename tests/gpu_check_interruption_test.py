#!/usr/bin/env python3
"""scripts/gpu-check on a lent device loses as little as possible when something goes wrong:

  * SIGTERM (the device tool's limit, `timeout`) while a command runs: that command's process group
    ends, the phase in flight is recorded as interrupted, the summaries go to --deliver, and
    gpu-check exits 128 + 15;
  * SIGKILL, which no handler sees: the command still dies with it (PR_SET_PDEATHSIG), so nothing
    keeps the GPU and the cores busy into the next call on a warm machine;
  * while a phase runs, --deliver is refreshed (every GPU_CHECK_DELIVERY_INTERVAL seconds), so a
    phase that runs into the tool's limit still leaves its log;
  * the fallback to a CUDA-only build follows CMake's own "could not find nlohmann_json" only, not
    any failed configure whose logged command line names -Dnlohmann_json_DIR;
  * what stopped the device test or the benchmark is read from its log (its HUNG or STICKY line,
    or the last RUN line of a run killed at its limit), and an sm_90a case is told from the others
    by its name (the later phases then run with ORTHOJIT_CUDA_SM90A=off).

The long command is the configure: a `cmake` placed first on PATH that answers --version and
otherwise writes its pid and sleeps. Runs on a machine without a GPU (--host-only).

    gpu_check_interruption_test.py
"""

import importlib.machinery
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPU_CHECK = os.path.join(ROOT, "scripts", "gpu-check")
FAKE_CMAKE = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "cmake version 3.99.0 (a stand-in that sleeps)"; exit 0; fi
echo $$ > "{pid_file}"
exec sleep 120
"""


def load_gpu_check():
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    loader = importlib.machinery.SourceFileLoader("gpu_check", GPU_CHECK)
    spec = importlib.util.spec_from_loader("gpu_check", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie waiting for its parent counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(predicate, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def start(folder, interval):
    """gpu-check --host-only with the sleeping cmake first on PATH; returns (process, pid file, deliver folder)."""
    bin_dir = os.path.join(folder, "bin")
    os.makedirs(bin_dir)
    pid_file = os.path.join(folder, "cmake.pid")
    with open(os.path.join(bin_dir, "cmake"), "w") as f:
        f.write(FAKE_CMAKE.format(pid_file=pid_file))
    os.chmod(os.path.join(bin_dir, "cmake"), 0o755)
    env = dict(os.environ, PATH=bin_dir + ":" + os.environ["PATH"], GPU_CHECK_DELIVERY_INTERVAL=str(interval))
    deliver = os.path.join(folder, "deliver")
    command = [sys.executable, GPU_CHECK, "--host-only", "--kit", "none", "--budget", "300", "--build-dir", os.path.join(folder, "build"),
               "--out-dir", os.path.join(folder, "out"), "--deliver", deliver]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    return process, pid_file, deliver


def start_until_configure(folder, interval, label, problems):
    """start(), then the pid of the sleeping configure once it runs: (process, pid, deliver folder),
    or None with the problem noted when gpu-check ended before it."""
    process, pid_file, deliver = start(folder, interval)
    wait_for(lambda: os.path.exists(pid_file) and open(pid_file).read().strip() or process.poll() is not None, 120)
    text = open(pid_file).read().strip() if os.path.exists(pid_file) else ""
    if not text:
        problems.append(f"{label}: the configure never started (gpu-check exit {process.poll()}); see {folder}")
        return None
    return process, int(text), deliver


def check_sigterm(problems):
    with tempfile.TemporaryDirectory() as folder:
        started = start_until_configure(folder, 1, "SIGTERM", problems)
        if started is None:
            return
        process, pid, deliver = started
        # While the configure runs, the periodic delivery brings the build log in the archive.
        def archived_build_log():
            archive = os.path.join(deliver, "gpu-check-results.tar.gz")
            try:
                with tarfile.open(archive) as tar:
                    member = tar.extractfile("gpu-check-out/build.log")
                    return member is not None and b"$ cmake" in member.read()
            except (OSError, KeyError, tarfile.TarError):
                return False
        if not wait_for(archived_build_log, 20):
            problems.append("the delivery was not refreshed while the build ran: no build.log with the cmake command in the archive")
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            problems.append("SIGTERM: gpu-check did not exit within 30 s")
            return
        if code != 128 + signal.SIGTERM:
            problems.append(f"SIGTERM: exit {code}, expected {128 + signal.SIGTERM}")
        if not wait_for(lambda: not alive(pid), 10):
            problems.append(f"SIGTERM: the command in flight (pid {pid}) outlived gpu-check")
            os.kill(pid, signal.SIGKILL)
        try:
            with open(os.path.join(deliver, "summary.json")) as f:
                phases = json.load(f)["phases"]
        except (OSError, ValueError, KeyError) as error:
            problems.append(f"SIGTERM: no delivered summary.json ({error})")
            return
        last = phases[-1] if phases else {}
        if last.get("phase") != "build" or last.get("status") != "failed" or "interrupted by SIGTERM" not in last.get("message", ""):
            problems.append(f"SIGTERM: the last phase delivered is {last}, expected the build, failed, interrupted by SIGTERM")


def check_sigkill(problems):
    with tempfile.TemporaryDirectory() as folder:
        started = start_until_configure(folder, 60, "SIGKILL", problems)
        if started is None:
            return
        process, pid, _ = started
        process.kill()
        process.wait()
        if not wait_for(lambda: not alive(pid), 10):
            problems.append(f"SIGKILL: the command in flight (pid {pid}) outlived gpu-check killed outright")
            os.kill(pid, signal.SIGKILL)


def check_nlohmann_detection(gpu_check, problems):
    cases = [
        ("$ cmake -S . -B build -Dnlohmann_json_DIR=/kit/nlohmann_json   (limit 400 s)\n"
         "CMake Error at CMakeLists.txt:40 (find_package):\n  Could NOT find Python (missing: Python_INCLUDE_DIRS Development.Module)\n", False),
        ("$ cmake -S . -B build   (limit 400 s)\nCMake Error at CMakeLists.txt:61 (find_package):\n"
         '  By not providing "Findnlohmann_json.cmake" in CMAKE_MODULE_PATH this project has\n'
         '  Could not find a package configuration file provided by "nlohmann_json"\n', True),
        ("$ cmake -S . -B build   (limit 400 s)\nCMake Error at CMakeLists.txt:61 (find_package):\n"
         '  Could not find a configuration file for package "nlohmann_json" that is compatible with requested version "3.10".\n', True),
    ]
    with tempfile.TemporaryDirectory() as folder:
        for text, expected in cases:
            log = os.path.join(folder, "build.log")
            with open(log, "w") as f:
                f.write(text)
            if gpu_check.nlohmann_json_missing(log) != expected:
                problems.append(f"nlohmann_json_missing said {not expected} for:\n{text}")


def check_stopping_lines(gpu_check, problems):
    log_text = ("$ cuda_device_test --json correctness.json   (limit 240 s)\n"
                "RUN jordan_ns5 standard bf16 96x320x3 [generated]\nPASS jordan_ns5 standard bf16 96x320x3 [generated]\n"
                "RUN jordan_ns5 standard bf16 256x1024x1 [generated hopper]\n{last}")
    sticky = "STICKY hopper product orthojit_hopper_product_kmajor_bf16 (NVRTC sm_90a): CUDA_ERROR_ILLEGAL_ADDRESS"
    cases = [
        (None, "", "jordan_ns5 standard bf16 256x1024x1 [generated hopper]", True),
        (3, "HUNG jordan_ns5 standard bf16 256x1024x1 [generated hopper] after 120 s\n", "HUNG jordan_ns5 standard bf16 256x1024x1 [generated hopper] after 120 s", True),
        (4, "FAIL x\n" + sticky + "\n(the context is lost)\n", sticky, True),
        (1, "FAIL jordan_ns5 standard bf16 256x1024x1 [generated hopper]\n", "", False),
    ]
    with tempfile.TemporaryDirectory() as folder:
        log = os.path.join(folder, "correctness.log")
        for code, last, expected, sm90a in cases:
            with open(log, "w") as f:
                f.write(log_text.format(last=last))
            line = gpu_check.stopping_line(log, code)
            if line != expected:
                problems.append(f"stopping_line for exit {code}: {line!r}, expected {expected!r}")
            if bool(gpu_check.SM90A_CASE.search(line)) != sm90a:
                problems.append(f"SM90A_CASE on {line!r}: {not sm90a}, expected {sm90a}")
    # The case a stop names, for the run that skips it (cuda_device_test --skip).
    for line, case in (("HUNG jordan_ns5 standard bf16 96x320x3 [generated] after 30 s", "jordan_ns5 standard bf16 96x320x3 [generated]"),
                       ("STICKY jordan_ns5 gram f16 300x200x2 [cublaslt]: cuLaunchKernel: CUDA_ERROR_ILLEGAL_ADDRESS (x: y)",
                        "jordan_ns5 gram f16 300x200x2 [cublaslt]"),
                       ("jordan_ns5 standard bf16 96x320x3 [fused-small]", "jordan_ns5 standard bf16 96x320x3 [fused-small]"), ("", "")):
        if gpu_check.stopped_case(line) != case:
            problems.append(f"stopped_case({line!r}) = {gpu_check.stopped_case(line)!r}, expected {case!r}")
    for name, sm90a in (("jordan_ns5 standard bf16 136x200x1 [generated per-product sm90a,sm90a,sm90a/n256]", True),
                        ("muon step jordan_ns5 bf16 (NVRTC sm_90a)", True), ("muon step jordan_ns5 bf16 (NVRTC sm_90)", False),
                        ("jordan_ns5 standard bf16 96x320x3 [fused-small]", False), ("jordan_ns5 gram f16 300x200x2 [cublaslt]", False)):
        if bool(gpu_check.SM90A_CASE.search(name)) != sm90a:
            problems.append(f"SM90A_CASE on {name!r}: {not sm90a}, expected {sm90a}")


def main():
    problems = []
    gpu_check = load_gpu_check()
    check_nlohmann_detection(gpu_check, problems)
    check_stopping_lines(gpu_check, problems)
    check_sigterm(problems)
    check_sigkill(problems)
    for problem in problems:
        print("FAIL:", problem)
    print("gpu-check interruption: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
