#!/usr/bin/env python3
"""Stress tests of the files orthojit replaces in place: tuning records, CUDA program-cache files
and optimizer states (issue 18, item 3). Each runs tests/stress/durable_file_writer.cpp's
stress_file_writer, which writes and checks them through the functions the tools call.

  file_durability_test.py WRITER kill        a writer killed (SIGKILL) at random points of a write
                                             leaves the old file or the new one, complete, never a
                                             torn one, and the next write works
  file_durability_test.py WRITER concurrent  two tuners merge into one record file while a third
                                             process reads it: every read is a complete record and
                                             the final file holds both tuners' entries
  file_durability_test.py WRITER full-disk   a write that runs out of space (a small tmpfs, mounted
                                             in a private mount namespace; RLIMIT_FSIZE where mounting
                                             is not allowed) fails with a clear error, keeps the old
                                             file and leaves no temporary file behind

Exit status 0 when every check passes, 1 with the failed check on stderr.
"""
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

WRITER = sys.argv[1]
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL: " + message, file=sys.stderr)


def run(*args, **kwargs):
    return subprocess.run([WRITER, *args], capture_output=True, text=True, timeout=60, **kwargs)


def version_of(kind, path):
    """The version in a complete file, or None when the file is torn (check-* fails)."""
    result = run("check-" + kind, path)
    return int(result.stdout) if result.returncode == 0 else None


def strays(folder, name):
    return sorted(f for f in os.listdir(folder) if f.startswith(name) and f != name and not f.endswith(".lock"))


def kinds(folder):
    """cache and state, less cache in a build without the CUDA program cache (exit 77)."""
    probe = run("cache", os.path.join(folder, "probe"), "0")
    if probe.returncode == 77:
        print("skipping the program cache: " + probe.stderr.strip())
        return ["state"]
    os.remove(os.path.join(folder, "probe"))
    return ["cache", "state"]


def kill_during_writes(folder):
    seed = int(os.environ.get("ORTHOJIT_STRESS_SEED", "0")) or random.randrange(1 << 30)
    print(f"seed {seed} (ORTHOJIT_STRESS_SEED={seed} repeats these kill times)")
    rng = random.Random(seed)
    for kind in kinds(folder):
        path = os.path.join(folder, kind + ".bin")
        check(run(kind, path, "1").returncode == 0, f"{kind}: the first write failed")
        seen = {1}
        for attempt in range(8):
            start = 10 * (attempt + 2)
            child = subprocess.Popen([WRITER, kind, path, str(start), "loop"], stderr=subprocess.PIPE)
            time.sleep(rng.uniform(0.0, 0.4))  # a random point in the middle of some write
            child.send_signal(signal.SIGKILL)
            child.wait()
            version = version_of(kind, path)
            check(version is not None, f"{kind}: after a kill at attempt {attempt} the file is torn")
            check(version in seen or version >= start, f"{kind}: after a kill the file holds version {version}, written by no one")
            seen.add(version)
            check(run(kind, path, "5").returncode == 0 and version_of(kind, path) == 5, f"{kind}: the write after a kill did not work")
            seen.add(5)
        print(f"{kind}: 8 kills, versions seen {sorted(seen)[:6]}...")
    # Tuning records: a tuner killed inside a merge.
    path = os.path.join(folder, "records.json")
    check(run("record", path, "first", "2").returncode == 0, "record: the first merges failed")
    for attempt in range(8):
        child = subprocess.Popen([WRITER, "record", path, f"killed{attempt}", "50"], stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.0, 0.4))
        child.send_signal(signal.SIGKILL)
        child.wait()
        check(run("check-record", path, "first:2").returncode == 0, f"record: after a kill at attempt {attempt} the record is torn or lost entries")
    check(run("record", path, "after", "3").returncode == 0, "record: the merge after the kills failed")
    check(run("check-record", path, "first:2", "after:3").returncode == 0, "record: the merge after the kills lost entries")
    # The killed writers' temporary files are removed by the next merge (it holds the lock, so
    # no live writer owns one).
    check(not strays(folder, "records.json"), f"record: temporary files of killed writers remain after the next merge: {strays(folder, 'records.json')}")
    print("record: 8 kills, the record complete after each")


def concurrent_tuners(folder):
    path = os.path.join(folder, "records.json")
    stop = os.path.join(folder, "stop")
    reader = subprocess.Popen([WRITER, "read-records", path, stop], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tuners = [subprocess.Popen([WRITER, "record", path, tag, "15"], stderr=subprocess.PIPE, text=True) for tag in ("tunerA", "tunerB")]
    for tuner in tuners:
        _, error = tuner.communicate(timeout=120)
        check(tuner.returncode == 0, "a tuner failed: " + error)
    open(stop, "w").close()
    out, error = reader.communicate(timeout=60)
    check(reader.returncode == 0, "the reader saw a torn record or lost entries: " + error)
    print("reader: " + out.strip())
    result = run("check-record", path, "tunerA:15", "tunerB:15")
    check(result.returncode == 0, "the final record lacks a tuner's entries: " + result.stderr)
    check(result.stdout.strip() == "30 entries", "the final record holds " + result.stdout.strip() + ", expected 30 entries")


def full_disk(folder, limit_file_size):
    """The old file is written with room to spare; the new write does not fit: on the 6 MiB tmpfs
    the old 4 MiB cache file and a new one cannot both be there (a 2 MiB state: three of them;
    records: the file grows a quarter megabyte per merge until old file plus new copy overflow);
    under RLIMIT_FSIZE (the fallback) the new write may not pass 1 MiB."""
    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    preexec = limited if limit_file_size else None
    for kind in kinds(folder) + ["record"]:
        path = os.path.join(folder, kind + ".bin")
        if kind == "record":
            check(run("record", path, "old", "1").returncode == 0, "record: the first merge failed")
            result = run("record", path, "new", "40", preexec_fn=preexec)
            check(result.returncode == 1, f"record: merges into a full disk exited {result.returncode}")
            check(run("check-record", path, "old:1").returncode == 0, "record: the full disk destroyed the old record")
        else:
            check(run(kind, path, "3").returncode == 0, f"{kind}: the old file could not be written")
            extra = os.path.join(folder, kind + ".second")
            if kind == "state" and not limit_file_size:
                check(run(kind, extra, "4").returncode == 0, "state: the second old file could not be written")
            result = run(kind, path, "9", preexec_fn=preexec)
            check(result.returncode == 1, f"{kind}: a write into a full disk exited {result.returncode}")
            check(version_of(kind, path) == 3, f"{kind}: the full disk destroyed the old file")
            if os.path.exists(extra):
                os.remove(extra)
        message = result.stderr.strip()
        check("No space left on device" in message or "File too large" in message,
              f"{kind}: the error does not say why (no space / file too large): {message!r}")
        check(not strays(folder, os.path.basename(path)), f"{kind}: temporary files left behind: {strays(folder, os.path.basename(path))}")
        print(f"{kind}: {message}")
        os.remove(path)


def main():
    mode = sys.argv[2]
    folder = tempfile.mkdtemp(prefix="orthojit-stress-")
    try:
        if mode == "kill":
            kill_during_writes(folder)
        elif mode == "concurrent":
            concurrent_tuners(folder)
        elif mode == "full-disk":
            # A private user and mount namespace with `folder` a 6 MiB tmpfs, this script inside;
            # where the machine allows no mount there, RLIMIT_FSIZE instead.
            inside = subprocess.run(["unshare", "-rm", "sh", "-c", f'mount -t tmpfs -o size=6m tmpfs "$1" && exec "$0" "$2" "$3" full-disk-inside "$1"',
                                     sys.executable, folder, os.path.abspath(__file__), WRITER])
            if inside.returncode == 0:
                return 0
            probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {folder}"], capture_output=True)
            if probe.returncode == 0:
                return 1  # the mount works, so the failure was the test's
            print("cannot mount a tmpfs here (" + probe.stderr.decode().strip() + "); RLIMIT_FSIZE instead")
            full_disk(folder, limit_file_size=True)
        elif mode == "full-disk-inside":
            full_disk(sys.argv[3], limit_file_size=False)
        else:
            print("unknown mode " + mode, file=sys.stderr)
            return 2
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
