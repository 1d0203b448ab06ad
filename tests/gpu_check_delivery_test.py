#!/usr/bin/env python3
"""scripts/gpu-check delivers its results in at most 8 files, because the device tool brings back
at most 8 files of at most 16 MiB from $OUT, none more than two folders down, named in letters,
digits, '.', '_' and '-' (anything else is left behind on the device machine and lost).

    gpu_check_delivery_test.py                    synthetic: scripts/gpu_check_delivery.py's deliver() on a folder made here
    gpu_check_delivery_test.py OUT_DIR DELIVER    a real run's --out-dir and --deliver folders

Checked: the delivered files obey the tool's limits; the archive holds every file of the run's
folder, byte for byte, except a file above 4 MiB, which holds its last MiB as NAME.tail; the
summaries delivered are the run's own. Exit 0 when all hold, 1 otherwise.
"""

import os
import re
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_FILES, MAX_BYTES, MAX_DEPTH = 8, 16 << 20, 2
NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def files_under(folder):
    return sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, files in os.walk(folder) for f in files)


def check(out, delivered, problems):
    names = files_under(delivered)
    if len(names) > MAX_FILES:
        problems.append(f"{delivered}: {len(names)} files, the tool brings back {MAX_FILES}: {names}")
    for name in names:
        parts = name.split(os.sep)
        if len(parts) - 1 > MAX_DEPTH:
            problems.append(f"{name}: {len(parts) - 1} folders down")
        if not all(NAME.match(p) for p in parts):
            problems.append(f"{name}: a name the tool leaves behind")
        if name.endswith(".tmp"):
            problems.append(f"{name}: a temporary file left in the delivery")
        if os.path.getsize(os.path.join(delivered, name)) > MAX_BYTES:
            problems.append(f"{name}: {os.path.getsize(os.path.join(delivered, name))} bytes, above 16 MiB")
    for name in ("summary.json", "summary.txt"):
        if not os.path.exists(os.path.join(delivered, name)):
            problems.append(f"{name} was not delivered")
        elif open(os.path.join(delivered, name), "rb").read() != open(os.path.join(out, name), "rb").read():
            problems.append(f"the delivered {name} is not the run's")
    archive_path = os.path.join(delivered, "gpu-check-results.tar.gz")
    if not os.path.exists(archive_path):
        problems.append("no gpu-check-results.tar.gz delivered")
        return
    with tarfile.open(archive_path) as archive:
        members = {m.name: m for m in archive.getmembers()}
        for name in files_under(out):
            path = os.path.join(out, name)
            whole = os.path.join("gpu-check-out", name)
            size = os.path.getsize(path)
            if size > 4 << 20:
                tail = members.get(whole + ".tail")
                if tail is None or whole in members:
                    problems.append(f"{name} ({size} bytes): expected only its tail in the archive")
                    continue
                with open(path, "rb") as f:
                    f.seek(size - (1 << 20))
                    if archive.extractfile(tail).read() != f.read():
                        problems.append(f"{name}: the archived tail is not the file's last MiB")
            elif whole not in members:
                problems.append(f"{name} is missing from the archive")
            elif name != "gpu-check.log" and archive.extractfile(members[whole]).read() != open(path, "rb").read():
                problems.append(f"{name}: the archived copy differs")  # the console log grows after the last delivery


def synthetic(problems):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import gpu_check_delivery
    with tempfile.TemporaryDirectory() as work:
        out, delivered = os.path.join(work, "out"), os.path.join(work, "deliver")
        os.makedirs(os.path.join(out, "muon"))
        for name, text in (("summary.json", '{"phases": []}\n'), ("summary.txt", "gpu-check\n"), ("bench.log", "case 1\n"),
                           ("muon/gpu_muon.json", "{}\n"), ("cases.txt", "jordan_ns5 1024x4096\n"), ("correctness.json", "[]\n"),
                           ("tuner.log", "t\n"), ("nccl.log", "n\n"), ("preflight.json", "{}\n"), ("gpu_bench_table.txt", "table\n")):
            with open(os.path.join(out, name), "w") as f:
                f.write(text)
        # A build log above the whole-file limit: its last MiB travels.
        with open(os.path.join(out, "build.log"), "wb") as f:
            f.write(os.urandom(5 << 20))
        gpu_check_delivery.deliver(out, delivered)
        check(out, delivered, problems)
        # A second delivery replaces the first (a later phase's summary), leaving no temporaries.
        with open(os.path.join(out, "summary.txt"), "w") as f:
            f.write("gpu-check, one phase later\n")
        gpu_check_delivery.deliver(out, delivered)
        check(out, delivered, problems)


def main():
    problems = []
    if len(sys.argv) == 3:
        check(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), problems)
    elif len(sys.argv) == 1:
        synthetic(problems)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for problem in problems:
        print("FAIL:", problem)
    print("delivery checks: " + ("all passed" if not problems else f"{len(problems)} failed"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
