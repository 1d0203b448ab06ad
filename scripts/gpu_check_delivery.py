"""The delivery of scripts/gpu-check's results into the device tool's $OUT.

The device tool brings back at most 8 files of at most 16 MiB from $OUT, none more than two folders
down, named in letters, digits, '.', '_' and '-' (its README); anything else stays on the lent
machine and is lost with it. A gpu-check run writes about twenty files, so it works in its
--out-dir and, after every phase, delivers this set: the summaries and tables to read at once, and
everything in one archive. tests/gpu_check_delivery_test.py checks it.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import time

DELIVERED = ("summary.txt", "summary.json", "gpu-check.log", "gpu_bench_table.txt", "compile_bench_table.txt")
ARCHIVE = "gpu-check-results.tar.gz"
ARCHIVE_WHOLE_FILE_BYTES = 4 << 20  # larger files (a long build log) go in as their last MiB
ARCHIVE_TAIL_BYTES = 1 << 20


def deliver(out, target):
    """Copies DELIVERED and an archive of all of `out` into `target`; each file is written under a
    temporary name and renamed, so a run killed meanwhile leaves the previous complete copy."""
    os.makedirs(target, exist_ok=True)
    for name in DELIVERED:
        source = os.path.join(out, name)
        if os.path.exists(source):
            shutil.copyfile(source, os.path.join(target, name + ".tmp"))
            os.replace(os.path.join(target, name + ".tmp"), os.path.join(target, name))
    partial = os.path.join(target, ARCHIVE + ".tmp")
    with tarfile.open(partial, "w:gz") as archive:
        for directory, folders, files in os.walk(out):
            folders.sort()
            for name in sorted(files):
                path = os.path.join(directory, name)
                arcname = os.path.join("gpu-check-out", os.path.relpath(path, out))
                try:
                    size = os.path.getsize(path)
                    if size <= ARCHIVE_WHOLE_FILE_BYTES:
                        archive.add(path, arcname=arcname)
                        continue
                    with open(path, "rb") as f:
                        f.seek(size - ARCHIVE_TAIL_BYTES)
                        data = f.read(ARCHIVE_TAIL_BYTES)
                except OSError:
                    continue  # a file that went away meanwhile
                info = tarfile.TarInfo(arcname + ".tail")
                info.size, info.mtime = len(data), int(time.time())
                archive.addfile(info, io.BytesIO(data))
    os.replace(partial, os.path.join(target, ARCHIVE))
