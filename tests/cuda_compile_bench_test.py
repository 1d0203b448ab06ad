#!/usr/bin/env python3
"""The CUDA compile benchmark runs without a GPU and reports what it measured: a cold NVRTC
compile and a warm load from the disk cache for each variant of one small case, and a clear
usage error for bad arguments. (The benchmark itself fails a case whose warm load does not come
from the disk or differs from what NVRTC compiled.)

    tests/cuda_compile_bench_test.py build/bin/orthojit_cuda_compile_bench
"""
import json
import os
import subprocess
import sys
import tempfile


def main(binary):
    with tempfile.TemporaryDirectory() as out:
        cache = os.path.join(out, "cache")
        command = [binary, "--out-dir", out, "--programs", "jordan_ns5", "--shapes", "64x128", "--strategies", "standard", "--arch", "sm_90",
                   "--repeats", "2", "--keep-cache", cache]
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        print(result.stdout + result.stderr)
        assert result.returncode == 0, f"exit {result.returncode}"
        report = json.load(open(os.path.join(out, "compile_bench.json")))
        assert report["complete"] is True, report
        variants = {case["variant"]: case for case in report["cases"]}
        # The default variant, the sm_90a tile (sm_90 given) and the fused kernel (64 rows).
        assert set(variants) == {"generated", "generated hopper", "fused-small"}, sorted(variants)
        for name, case in variants.items():
            assert "error" not in case and "not_compiled" not in case, case
            assert case["target"] == ("sm_90a" if name == "generated hopper" else "sm_90"), case
            assert case["cold_compile_s"] > 0.05, case  # NVRTC ran: a cache hit takes milliseconds
            assert 0 < case["cache_hit_ms"] < 1000 * case["cold_compile_s"], case
            assert case["image_bytes"] > 1000 and case["launches"] >= 1, case
            assert abs(case["warm_ms"] - (case["schedule_ms"] + case["generate_ms"] + case["cache_hit_ms"])) < 1e-3, case  # printed to 6 digits
            assert case["runner_ms"] is None, case  # no device: no module load measured
        # --keep-cache keeps one program file per case.
        files = [name for _, _, names in os.walk(cache) for name in names if name.endswith(".ojbin")]
        assert len(files) == len(variants), files
        table = open(os.path.join(out, "compile_bench_table.txt")).read()
        assert "of 3 cases load warm in under 5 ms" in table, table
        assert "no device" in table, table

        bad = subprocess.run([binary, "--shapes", "64by128"], capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and "64by128" in bad.stderr and "ROWSxCOLS" in bad.stderr, bad.stderr
        bad = subprocess.run([binary, "--arch", "sm_70"], capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and "sm_70" in bad.stderr, bad.stderr
    print("cuda_compile_bench_test: ok")


if __name__ == "__main__":
    main(sys.argv[1])
