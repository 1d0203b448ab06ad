# orthojit — the two commands a newcomer runs: `make demo` and `make test`.
# Both install what is missing (scripts/install-deps.sh), configure once, build, then run.
BUILD ?= build
JOBS ?= $(shell nproc)
# The GPU machines' configuration (cmake/optional_parts.cmake): no LLVM, OpenBLAS, MPI,
# GoogleTest or Google Benchmark, the CUDA backend on. `make test` builds it too and runs what must
# work there (see test-minimal).
MINIMAL ?= build-minimal

.PHONY: all deps build test test-minimal demo bench clean

all: build

deps:
	@scripts/install-deps.sh

# Every optional part ON: this build must have them all (install-deps.sh installs them), so a
# missing one fails the configure instead of quietly leaving its tests out.
$(BUILD)/build.ninja: | deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DORTHOJIT_WITH_LLVM=ON -DORTHOJIT_WITH_VENDOR_BLAS=ON \
	  -DORTHOJIT_WITH_MPI=ON -DORTHOJIT_WITH_GTEST=ON -DORTHOJIT_WITH_BENCHMARK=ON -DORTHOJIT_BUILD_PYTHON=ON > $(BUILD).configure.log 2>&1 \
	  || { cat $(BUILD).configure.log; exit 1; }

build: deps $(BUILD)/build.ninja
	@bash -o pipefail -c 'cmake --build $(BUILD) -j $(JOBS) 2>&1 | { grep -v "^\[" || true; }'
	@test -x $(BUILD)/bin/orthojit

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory test-minimal

# The minimal build: -O0 without debug info and only the targets its checks need, since the compile
# is what CI pays for (docs/cuda-backend.md gives the cost). Its checks: build_parts_test (the CLI
# names the parts left out, runs --backend ref, and refuses --backend cpu with the reason),
# c_api_test (the C API without the CPU backend), and scripts/gpu-check's host-only run in this
# build directory (preflight, build of the GPU binaries, cuda_device_test's dry run for one
# program with the main build's warm program cache, the benchmark's no-device report), its
# --dry-run, and its refusal of bad arguments.
$(MINIMAL)/build.ninja: | deps
	@cmake -S . -B $(MINIMAL) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DCMAKE_C_FLAGS_DEBUG=-O0 \
	  -DORTHOJIT_WITH_LLVM=OFF -DORTHOJIT_WITH_VENDOR_BLAS=OFF -DORTHOJIT_WITH_MPI=OFF -DORTHOJIT_WITH_GTEST=OFF \
	  -DORTHOJIT_WITH_BENCHMARK=OFF -DORTHOJIT_BUILD_PYTHON=OFF > $(MINIMAL).configure.log 2>&1 \
	  || { cat $(MINIMAL).configure.log; exit 1; }

test-minimal: deps $(MINIMAL)/build.ninja
	@bash -o pipefail -c 'cmake --build $(MINIMAL) -j $(JOBS) --target orthojit c_api_test 2>&1 | { grep -v "^\[" || true; }'
	@cd $(MINIMAL) && ctest --output-on-failure -R '^(build_parts_test|c_api_test)$$'
	@ORTHOJIT_CACHE_DIR=$(CURDIR)/$(BUILD)/test-cache scripts/gpu-check --host-only --build-dir $(MINIMAL) --budget 300 \
	  --out-dir $(MINIMAL)/gpu-check-out > $(MINIMAL)/gpu-check.txt 2>&1 || { cat $(MINIMAL)/gpu-check.txt; exit 1; }
	@cat $(MINIMAL)/gpu-check-out/summary.txt
	@scripts/gpu-check --dry-run --out-dir $(MINIMAL)/gpu-check-dry > $(MINIMAL)/gpu-check-dry.txt 2>&1 || { cat $(MINIMAL)/gpu-check-dry.txt; exit 1; }
	@scripts/gpu-check --budget nope > /dev/null 2>&1; test $$? -eq 2 || { echo "scripts/gpu-check accepted --budget nope"; exit 1; }

# The shipped programs on a random matrix, then the embedded default model (a small Llama-style
# config) tuned and benchmarked: standard vs Gram vs OpenBLAS. Records go to build/demo-cache.
demo: build
	@$(BUILD)/bin/orthojit demo
	@echo
	@ORTHOJIT_CACHE_DIR=$(BUILD)/demo-cache $(BUILD)/bin/orthojit tune --model default --budget 20
	@echo
	@ORTHOJIT_CACHE_DIR=$(BUILD)/demo-cache $(BUILD)/bin/orthojit bench --model default --budget 15

# Baselines side by side (OpenBLAS on its AVX-512 kernel; see bench/RESULTS.md).
bench: build
	@env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE=SkylakeX $(BUILD)/bin/orthojit_ns_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

clean:
	rm -rf $(BUILD) $(BUILD).configure.log $(MINIMAL) $(MINIMAL).configure.log
