"""The resident memory of this process, for the memory benchmarks (bench/distributed_memory.py,
bench/muon_checkpoint_memory.py; the C++ ones use bench/resident_memory.h). Run them with
MALLOC_MMAP_THRESHOLD_=1048576 so that glibc maps every large block and unmaps it when freed: the
resident memory then measures what is live."""


def status_kib(field):
    """A field of /proc/self/status in KiB (VmRSS, VmHWM)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak():
    """Resets VmHWM to the current VmRSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")
