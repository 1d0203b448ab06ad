# orthojit — the two commands a newcomer runs: `make demo` and `make test`.
# Both install what is missing (scripts/install-deps.sh), configure once, build, then run.
BUILD ?= build
JOBS ?= $(shell nproc)
# The GPU machines' configuration (cmake/optional_parts.cmake): no LLVM, OpenBLAS, MPI,
# GoogleTest or Google Benchmark, the CUDA backend on. `make test` builds it too and runs what must
# work there (see test-minimal).
MINIMAL ?= build-minimal

.PHONY: all deps build test test-torch-pypi test-minimal test-sanitize test-sanitize-address test-sanitize-thread fuzz demo bench clean

all: build

deps:
	@scripts/install-deps.sh

# Line tables only (-g1): backtraces, perf and sanitizer reports keep file:line, and the build
# compiles about a third faster than with full debug info (-g), which CI pays for on two cores
# (docs/testing.md, "Cost"). `make build MAIN_FLAGS=` on a fresh build folder keeps CMake's -g.
MAIN_FLAGS ?= -DCMAKE_CXX_FLAGS_RELWITHDEBINFO='-O2 -g1 -DNDEBUG' -DCMAKE_C_FLAGS_RELWITHDEBINFO='-O2 -g1 -DNDEBUG'
# Every optional part ON: this build must have them all (install-deps.sh installs them), so a
# missing one fails the configure instead of quietly leaving its tests out.
$(BUILD)/build.ninja: | deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(MAIN_FLAGS) -DORTHOJIT_WITH_LLVM=ON -DORTHOJIT_WITH_VENDOR_BLAS=ON \
	  -DORTHOJIT_WITH_MPI=ON -DORTHOJIT_WITH_GTEST=ON -DORTHOJIT_WITH_BENCHMARK=ON -DORTHOJIT_BUILD_PYTHON=ON > $(BUILD).configure.log 2>&1 \
	  || { cat $(BUILD).configure.log; exit 1; }

build: deps $(BUILD)/build.ninja
	@bash -o pipefail -c 'cmake --build $(BUILD) -j $(JOBS) 2>&1 | { grep -v "^\[" || true; }'
	@test -x $(BUILD)/bin/orthojit

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory test-torch-pypi
	@$(MAKE) --no-print-directory test-minimal
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS)

# The Python tests again on a current PyTorch from PyPI (Debian's is 1.13; users train on 2.x):
# torch.optim.Muon (PyTorch >= 2.9), which the torch preset is checked against, exists only there,
# and torch.distributed's gloo differs. A virtual environment of Debian's python3 (the interpreter
# the extension is built for), made once per build folder (~3.5 GB with the CUDA libraries the
# wheel requires; CPU only here).
TORCH_PYPI ?= 2.15.0
TORCH_VENV ?= $(BUILD)/venv-torch-$(TORCH_PYPI)
$(TORCH_VENV)/.complete: | deps
	@rm -rf $(TORCH_VENV)
	@/usr/bin/python3 -m venv $(TORCH_VENV)
	@echo "orthojit: installing torch==$(TORCH_PYPI), numpy, pytest and matplotlib from PyPI into $(TORCH_VENV)"
	@$(TORCH_VENV)/bin/python -m pip install -q --disable-pip-version-check "torch==$(TORCH_PYPI)" numpy pytest matplotlib
	@touch $@

test-torch-pypi: build $(TORCH_VENV)/.complete
	@$(TORCH_VENV)/bin/python -c "import sys, torch; sys.exit(0 if hasattr(torch.optim, 'Muon') else f'torch {torch.__version__} has no torch.optim.Muon: its tests would be skipped')"
	@cd $(BUILD) && PYTHONPATH=$(abspath $(BUILD))/python ORTHOJIT_CACHE_DIR=$(abspath $(BUILD))/test-cache ORTHOJIT_SOURCE_DIR=$(CURDIR) \
	  $(abspath $(TORCH_VENV))/bin/python -m pytest -q -rs -p no:cacheprovider $(CURDIR)/tests/python

# The minimal build: -O0 without debug info and only the targets its checks need, since the compile
# is what CI pays for (docs/cuda-backend.md gives the cost). Its checks: build_parts_test (the CLI
# names the parts left out, runs --backend ref, and refuses --backend cpu with the reason),
# c_api_test (the C API without the CPU backend), and scripts/gpu-check's host-only run in this
# build directory (preflight, build of the GPU binaries, cuda_device_test's dry run for one
# program with the main build's warm program cache, the benchmark's no-device report) with its
# delivery of at most 8 files (what the device tool brings back), its --dry-run, and its refusal of
# bad arguments.
$(MINIMAL)/build.ninja: | deps
	@cmake -S . -B $(MINIMAL) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DCMAKE_C_FLAGS_DEBUG=-O0 \
	  -DORTHOJIT_WITH_LLVM=OFF -DORTHOJIT_WITH_VENDOR_BLAS=OFF -DORTHOJIT_WITH_MPI=OFF -DORTHOJIT_WITH_GTEST=OFF \
	  -DORTHOJIT_WITH_BENCHMARK=OFF -DORTHOJIT_BUILD_PYTHON=OFF > $(MINIMAL).configure.log 2>&1 \
	  || { cat $(MINIMAL).configure.log; exit 1; }

test-minimal: deps $(MINIMAL)/build.ninja
	@bash -o pipefail -c 'cmake --build $(MINIMAL) -j $(JOBS) --target orthojit c_api_test 2>&1 | { grep -v "^\[" || true; }'
	@cd $(MINIMAL) && ctest --output-on-failure -R '^(build_parts_test|c_api_test)$$'
	@rm -rf $(MINIMAL)/gpu-check-deliver
	@ORTHOJIT_CACHE_DIR=$(CURDIR)/$(BUILD)/test-cache scripts/gpu-check --host-only --build-dir $(MINIMAL) --budget 300 \
	  --out-dir $(MINIMAL)/gpu-check-out --deliver $(MINIMAL)/gpu-check-deliver > $(MINIMAL)/gpu-check.txt 2>&1 || { cat $(MINIMAL)/gpu-check.txt; exit 1; }
	@cat $(MINIMAL)/gpu-check-out/summary.txt
	@python3 tests/gpu_check_delivery_test.py $(MINIMAL)/gpu-check-out $(MINIMAL)/gpu-check-deliver
	@scripts/gpu-check --dry-run --out-dir $(MINIMAL)/gpu-check-dry > $(MINIMAL)/gpu-check-dry.txt 2>&1 || { cat $(MINIMAL)/gpu-check-dry.txt; exit 1; }
	@scripts/gpu-check --budget nope > /dev/null 2>&1; test $$? -eq 2 || { echo "scripts/gpu-check accepted --budget nope"; exit 1; }
	@scripts/gpu-check --phases bench,nope > /dev/null 2>&1; test $$? -eq 2 || { echo "scripts/gpu-check accepted --phases bench,nope"; exit 1; }

# Sanitizer builds (docs/testing.md gives what runs where, the cost and the suppressions), each in
# its own build folder, -O1 with line tables (the CPU backend's hot host loops keep their -O3).
# ASan + UBSan: every test of the main build but the benchmarks (not tests; not built) and the
# suites that compile and emulate the generated GPU code (ORTHOJIT_TEST_GPU_CODE=OFF: NVRTC and
# emulated kernels, which the sanitizers do not instrument, and CI's time), the same optional parts
# otherwise, the Python tests included (tests/CMakeLists.txt preloads libasan into the interpreter). Leak checking is on, with tests/sanitizers/lsan.supp naming the third-party
# allocations that live until exit by design; a UB report fails its test (-fno-sanitize-recover).
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
SANITIZE_DIR := $(CURDIR)/tests/sanitizers
SANITIZE_ENV := ASAN_OPTIONS=detect_leaks=1:check_initialization_order=1:halt_on_error=1 \
  LSAN_OPTIONS=suppressions=$(SANITIZE_DIR)/lsan.supp:print_suppressions=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(SANITIZE_DIR)/tsan.supp
SANITIZE_CONFIGURE := -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO='-O1 -g1' \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO='-O1 -g1' -DORTHOJIT_WERROR=OFF -DORTHOJIT_WITH_BENCHMARK=OFF -DORTHOJIT_BUILD_BENCH=OFF \
  -DORTHOJIT_WITH_LLVM=ON -DORTHOJIT_WITH_VENDOR_BLAS=ON -DORTHOJIT_WITH_GTEST=ON
# ThreadSanitizer: the tests where several threads share state (TSAN_TESTS, a ctest -R pattern):
#   the thread pool: the GEMM driver, the CPU executable (threads, batches in rounds of one matrix
#     per worker) and the AMX GEMM on 1..3 threads
#     and from concurrent callers, and the f64 reference products on several threads;
#   the kernel caches: the CPU JIT's in-memory cache (compiles from racing threads) and the CUDA
#     program cache's disk entries written by concurrent threads;
#   the tuner's concurrent writers: tuning records merged by writers in threads and in processes;
#   the device runs' hang watchdog (its thread against the caller's begin/idle);
#   the state file's writer and reader, which hash large pieces on a second thread beside their I/O.
# MPI is off in this build (the MPI engine's own threads are Open MPI's, which is not instrumented).
TSAN_TESTS := ThreadPool\.|GemmDriver\.ResultDoesNotDependOnThreadCount|CpuBackend\.IdenticalResultsAcrossRunsAndThreadCounts|CpuBackend\.EachMatrixOfABatchGetsTheBitsItGetsAlone|CpuBackend\.ConcurrentCallers|AmxGemm\.IdenticalBitsForOneAndTwoThreadsAndConcurrentBatches|F64Products\.PortableOnSeveralThreads|KernelCache\.|ProgramCacheTest\.ConcurrentThreads|TuningRecords\.|HangWatchdog\.Concurrent|SafetensorsFile\.LargePieces
TSAN_TARGETS := thread_pool_test gemm_driver_test cpu_backend_test amx_test f64_products_test kernel_cache_test cuda_program_cache_test autotune_test hang_watchdog_test safetensors_file_test

$(ASAN_BUILD)/build.ninja: | deps
	@cmake -S . -B $(ASAN_BUILD) $(SANITIZE_CONFIGURE) -DORTHOJIT_SANITIZE=address,undefined -DORTHOJIT_TEST_GPU_CODE=OFF -DORTHOJIT_WITH_MPI=ON \
	  -DORTHOJIT_BUILD_PYTHON=ON > $(ASAN_BUILD).configure.log 2>&1 || { cat $(ASAN_BUILD).configure.log; exit 1; }

$(TSAN_BUILD)/build.ninja: | deps
	@cmake -S . -B $(TSAN_BUILD) $(SANITIZE_CONFIGURE) -DORTHOJIT_SANITIZE=thread -DORTHOJIT_WITH_MPI=OFF \
	  -DORTHOJIT_BUILD_PYTHON=OFF > $(TSAN_BUILD).configure.log 2>&1 || { cat $(TSAN_BUILD).configure.log; exit 1; }

# The sanitizer options are set for the build too: gtest_discover_tests runs each test binary.
# test-sanitize runs both halves; .ci/run runs the thread half after `make test` (docs/testing.md: the cost).
test-sanitize: test-sanitize-address test-sanitize-thread

test-sanitize-address: deps $(ASAN_BUILD)/build.ninja
	@$(SANITIZE_ENV) bash -o pipefail -c 'cmake --build $(ASAN_BUILD) -j $(JOBS) 2>&1 | { grep -v "^\[" || true; }'
	@cd $(ASAN_BUILD) && $(SANITIZE_ENV) ctest --output-on-failure -j $(JOBS)

test-sanitize-thread: deps $(TSAN_BUILD)/build.ninja
	@$(SANITIZE_ENV) bash -o pipefail -c 'cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(TSAN_TARGETS) 2>&1 | { grep -v "^\[" || true; }'
	@cd $(TSAN_BUILD) && $(SANITIZE_ENV) ctest --output-on-failure -j $(JOBS) -R '$(TSAN_TESTS)'

# libFuzzer targets for the readers of outside input (tests/fuzz/: the DSL, .npy, safetensors and
# optimizer states, tuning records, CUDA program-cache files, DeepSpeed and Hugging Face configs),
# built with clang-19 and -fsanitize=fuzzer,address,undefined in their own folder, the readers'
# sources only. `make fuzz FUZZ_SECONDS=60` runs each that long (scripts/run-fuzzers); `make test`
# runs each for FUZZ_SMOKE_SECONDS so they keep compiling and finding nothing.
FUZZ ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 3
$(FUZZ)/build.ninja: | deps
	@cmake -S . -B $(FUZZ) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++-19 -DCMAKE_C_COMPILER=clang-19 \
	  -DORTHOJIT_BUILD_FUZZERS=ON > $(FUZZ).configure.log 2>&1 || { cat $(FUZZ).configure.log; exit 1; }

fuzz: deps $(FUZZ)/build.ninja
	@bash -o pipefail -c 'cmake --build $(FUZZ) -j $(JOBS) 2>&1 | { grep -v "^\[" || true; }'
	@scripts/run-fuzzers $(FUZZ) $(FUZZ_SECONDS)

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
	@env -u OPENBLAS_L2_SIZE -u OPENBLAS_CORETYPE $(BUILD)/bin/orthojit_ns_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
	@$(BUILD)/bin/orthojit_gemm_bench --benchmark_filter='amx|MeasuredClock|AmxMicrokernel' --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
	@scripts/bench-vs-torch-cpu $(BUILD)

clean:
	rm -rf $(BUILD) $(BUILD).configure.log $(MINIMAL) $(MINIMAL).configure.log $(ASAN_BUILD) $(ASAN_BUILD).configure.log \
	  $(TSAN_BUILD) $(TSAN_BUILD).configure.log $(FUZZ) $(FUZZ).configure.log
