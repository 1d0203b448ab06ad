"""scripts/gpu-check's correctness and bench phases on a device, with stand-in binaries (shell
scripts that log their arguments and answer as told). In the correctness phase: after a check that ran to its end, the
persistent kernels run once more with --one-sm, and that rerun decides the phase as much as the
check does; after a check that stopped (hung), no one-SM rerun (the stop has its own rerun). The
check leaves the benchmark its full time when both fit; the bench phase times the headline cases
before the compile benchmark.

Bugs this sees: the one-SM rerun not run, run without --one-sm, its failure not failing the phase,
run after a hang, its result missing from the phase's message, or its stop on an sm_90a case not
keeping the tile out of the later phases; a correctness check that does not leave the benchmark its
full time when both fit; the compile benchmark run before the benchmark's headline cases; the
background build of the optional targets not waited for, not read back, recorded twice, or waited
for when no phase needs it; a benchmark hung on an sm_90a case not run again without the tile.

    gpu_check_phases_test.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_check_interruption_test import load_gpu_check  # noqa: E402

# Exit codes by run: the main check answers $MAIN_CODE, the --one-sm run $ONE_SM_CODE; each run
# appends its arguments to calls.txt.
FAKE_DEVICE_TEST = """#!/bin/sh
echo "$@" >> "{folder}/calls.txt"
case " $* " in
  *" --one-sm "*) code=$ONE_SM_CODE; echo "PASS jordan_ns5 standard bf16 256x1024x1 [generated]";;
  *) code=$MAIN_CODE; echo "PASS jordan_ns5 standard bf16 96x320x3 [generated]";;
esac
if [ "$code" = 3 ]; then echo "HUNG jordan_ns5 gram bf16 256x1024x1 [generated] after 30 s"; exit 3; fi
if [ "$code" = 4 ]; then echo "STICKY jordan_ns5 standard bf16 256x1024x1 [generated hopper]: CUDA_ERROR_ILLEGAL_ADDRESS"; exit 4; fi
if [ "$code" = 0 ]; then echo "3 passed, 0 failed, 1 not applicable, 1.0 s"; else echo "2 passed, 1 failed, 1 not applicable, 1.0 s"; fi
exit $code
"""


def run_phase(gpu_check, folder, main_code, one_sm_code):
    build = os.path.join(folder, "build")
    os.makedirs(os.path.join(build, "bin"), exist_ok=True)
    fake = os.path.join(build, "bin", "cuda_device_test")
    with open(fake, "w") as f:
        f.write(FAKE_DEVICE_TEST.format(folder=folder))
    os.chmod(fake, 0o755)
    out = os.path.join(folder, "out")
    os.makedirs(out, exist_ok=True)
    calls = os.path.join(folder, "calls.txt")
    if os.path.exists(calls):
        os.remove(calls)
    os.environ.pop("OUT", None)  # no delivery
    check = gpu_check.Check(gpu_check.parse_arguments(["--out-dir", out, "--build-dir", build, "--budget", "600"]))
    check.env = dict(os.environ, MAIN_CODE=str(main_code), ONE_SM_CODE=str(one_sm_code))
    entry = check.phase_correctness(0, True)
    with open(calls) as f:
        return entry, [line.split() for line in f], check.env.get("ORTHOJIT_CUDA_SM90A")


def main():
    gpu_check = load_gpu_check()
    problems = []
    with tempfile.TemporaryDirectory() as folder:
        # (main check's exit, one-SM rerun's exit, the phase's status, whether the rerun runs)
        for main_code, one_sm_code, status, rerun in ((0, 0, "ok", True), (0, 1, "failed", True), (1, 0, "failed", True), (3, 0, "failed", False),
                                                      (0, 4, "failed", True)):
            label = f"check exit {main_code}, one-SM exit {one_sm_code}"
            entry, calls, sm90a = run_phase(gpu_check, folder, main_code, one_sm_code)
            # A rerun stopped by an sm_90a case keeps the tile out of the later phases, as the check does.
            if (one_sm_code == 4) != (sm90a == "off"):
                problems.append(f"{label}: ORTHOJIT_CUDA_SM90A is {sm90a!r} for the later phases")
            one_sm_calls = [c for c in calls if "--one-sm" in c]
            if entry["status"] != status:
                problems.append(f"{label}: phase {entry['status']}, expected {status}: {entry['message']}")
            if rerun and len(one_sm_calls) != 1:
                problems.append(f"{label}: {len(one_sm_calls)} --one-sm runs, expected 1: {calls}")
            if not rerun and one_sm_calls:
                problems.append(f"{label}: a --one-sm run after the check stopped: {calls}")
            if rerun and "one SM's wave (--one-sm): " not in entry["message"]:
                problems.append(f"{label}: the rerun's result is not in the message: {entry['message']}")
            if rerun and one_sm_calls and "--json" not in one_sm_calls[0]:
                problems.append(f"{label}: the rerun keeps no JSON: {one_sm_calls[0]}")
    # The benchmark phase runs orthojit_gpu_bench before the compile benchmark (a short budget then
    # costs the compile times, not the headline cases), and gives it a --budget.
    with tempfile.TemporaryDirectory() as folder:
        build = os.path.join(folder, "build")
        os.makedirs(os.path.join(build, "bin"))
        for name in ("orthojit_gpu_bench", "orthojit_cuda_compile_bench"):
            with open(os.path.join(build, "bin", name), "w") as f:
                f.write(f'#!/bin/sh\necho "{name} $*" >> "{folder}/calls.txt"\n')
            os.chmod(os.path.join(build, "bin", name), 0o755)
        check = gpu_check.Check(gpu_check.parse_arguments(["--out-dir", os.path.join(folder, "out"), "--build-dir", build, "--budget", "600"]))
        os.makedirs(check.out, exist_ok=True)
        check.preflight = {"python": {}}
        check.phase_bench(True)
        with open(os.path.join(folder, "calls.txt")) as f:
            order = [line.split()[0] for line in f]
        if order != ["orthojit_gpu_bench", "orthojit_cuda_compile_bench"]:
            problems.append(f"bench phase ran {order}, expected the benchmark before the compile benchmark")

    # A benchmark stopped by its watchdog on an sm_90a case runs once more without the tile (the
    # first run's table kept aside), and the later phases keep the tile off.
    with tempfile.TemporaryDirectory() as folder:
        build = os.path.join(folder, "build")
        os.makedirs(os.path.join(build, "bin"))
        out = os.path.join(folder, "out")
        with open(os.path.join(build, "bin", "orthojit_gpu_bench"), "w") as f:
            f.write(f'#!/bin/sh\necho "orthojit_gpu_bench sm90a=$ORTHOJIT_CUDA_SM90A $*" >> "{folder}/calls.txt"\n'
                    f'echo "run with sm90a=$ORTHOJIT_CUDA_SM90A" > "{out}/gpu_bench_table.txt"\n'
                    'if [ "$ORTHOJIT_CUDA_SM90A" != off ]; then echo "HUNG jordan_ns5 4096x4096x1 standard [generated hopper] after 61 s"; exit 3; fi\n')
        with open(os.path.join(build, "bin", "orthojit_cuda_compile_bench"), "w") as f:
            f.write(f'#!/bin/sh\necho "orthojit_cuda_compile_bench" >> "{folder}/calls.txt"\n')
        for name in ("orthojit_gpu_bench", "orthojit_cuda_compile_bench"):
            os.chmod(os.path.join(build, "bin", name), 0o755)
        check = gpu_check.Check(gpu_check.parse_arguments(["--out-dir", out, "--build-dir", build, "--budget", "600"]))
        os.makedirs(check.out, exist_ok=True)
        check.env.pop("ORTHOJIT_CUDA_SM90A", None)
        check.preflight = {"python": {}}
        entry = check.phase_bench(True)
        with open(os.path.join(folder, "calls.txt")) as f:
            calls = [line.split() for line in f]
        runs = [c[1] for c in calls if c[0] == "orthojit_gpu_bench"]
        if runs != ["sm90a=", "sm90a=off"] or not all("--case-timeout" in c for c in calls if c[0] == "orthojit_gpu_bench"):
            problems.append(f"bench after a hung sm_90a case: runs {calls}")
        if entry["status"] != "ok" or "again without the sm_90a tile" not in entry["message"] or check.env.get("ORTHOJIT_CUDA_SM90A") != "off":
            problems.append(f"bench after a hung sm_90a case: {entry}, ORTHOJIT_CUDA_SM90A={check.env.get('ORTHOJIT_CUDA_SM90A')!r}")
        kept = os.path.join(out, "gpu_bench-with-sm90a_table.txt")
        if not os.path.exists(kept) or "sm90a=\n" not in open(kept).read():
            problems.append("bench after a hung sm_90a case: the first run's table was not kept aside")

    # On a device the optional targets build in the background: the phases that need them wait,
    # see which built (failed_targets, the parts from `orthojit info`), and one record says so; a
    # build no phase waited for is stopped at the end, not waited for.
    with tempfile.TemporaryDirectory() as folder:
        fake_bin = os.path.join(folder, "fake-bin")
        build = os.path.join(folder, "build")
        os.makedirs(fake_bin)
        os.makedirs(os.path.join(build, "bin"))
        standin = os.path.join(folder, "orthojit-standin")  # what the fake ninja "builds": an `orthojit info --json`
        with open(standin, "w") as f:
            f.write("#!/bin/sh\necho '{\"parts\": [{\"name\": \"cli\", \"built\": true, \"detail\": \"x\"}]}'\n")
        os.chmod(standin, 0o755)
        with open(os.path.join(fake_bin, "ninja"), "w") as f:
            f.write('#!/bin/sh\nfor t; do last=$t; done\necho "ninja $last"\n'
                    'case $last in slow) exec sleep 60;; _orthojit) echo "module.cpp: error: no"; exit 1;; esac\n'
                    f'cp "{standin}" "{build}/bin/$last"\n')
        os.chmod(os.path.join(fake_bin, "ninja"), 0o755)
        check = gpu_check.Check(gpu_check.parse_arguments(["--out-dir", os.path.join(folder, "out"), "--build-dir", build, "--budget", "600"]))
        os.makedirs(check.out, exist_ok=True)
        check.env = dict(os.environ, PATH=fake_bin + os.pathsep + os.environ["PATH"])
        check.start_optional_build(["orthojit", "_orthojit"], [])
        check.wait_for_optional_build()
        record = next((p for p in check.phases if p["phase"] == "build-optional"), None)
        if not record or record["status"] != "failed" or "built orthojit" not in record["message"] or "_orthojit failed" not in record["message"]:
            problems.append(f"background build: record {record}")
        if [t.split()[0] for t in check.failed_targets] != ["_orthojit"]:
            problems.append(f"background build: failed_targets {check.failed_targets}")
        if [p["name"] for p in check.parts] != ["cli"]:
            problems.append(f"background build: parts {check.parts} (orthojit info not read after it)")
        check.wait_for_optional_build()
        if sum(p["phase"] == "build-optional" for p in check.phases) != 1:
            problems.append("background build: recorded more than once")
        check = gpu_check.Check(gpu_check.parse_arguments(["--out-dir", os.path.join(folder, "out2"), "--build-dir", build, "--budget", "600"]))
        os.makedirs(check.out, exist_ok=True)
        check.env = dict(os.environ, PATH=fake_bin + os.pathsep + os.environ["PATH"])
        begun = time.time()
        check.start_optional_build(["slow"], [])
        time.sleep(0.5)
        check.drop_optional_build()
        record = next((p for p in check.phases if p["phase"] == "build-optional"), None)
        if time.time() - begun > 20 or not record or record["status"] != "skipped":
            problems.append(f"background build not needed: {time.time() - begun:.0f} s, record {record}")

    # What the check leaves for the benchmark: its full time while both fit, else its minimum,
    # else nothing (the check first); nothing when the benchmark is not selected.
    check = gpu_check.Check(gpu_check.parse_arguments(["--out-dir", os.path.join(tempfile.gettempdir(), "gc-reserve"), "--budget", "600"]))
    full, minimum, correctness = gpu_check.BENCH["full"], gpu_check.BENCH["minimum"], gpu_check.CORRECTNESS["minimum"]
    for left, selected, expected in ((600, gpu_check.PHASES, full), (correctness + full, gpu_check.PHASES, full),
                                     (correctness + full - 1, gpu_check.PHASES, minimum), (correctness + minimum, gpu_check.PHASES, minimum),
                                     (correctness + minimum - 1, gpu_check.PHASES, 0), (600, ("correctness", "muon"), 0)):
        check.start = time.time() - (600 - left) + 0.5  # left() = `left` + 0.5 s less the time this takes
        got = check.correctness_reserve(list(selected), True)
        if got != expected:
            problems.append(f"correctness_reserve with {left} s left, phases {selected}: {got}, expected {expected}")
    for problem in problems:
        print("FAIL " + problem)
    print("gpu-check phases: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
