# orthojit — the two commands a newcomer runs: `make demo` and `make test`.
# Both install what is missing (scripts/install-deps.sh), configure once, build, then run.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps build test demo bench clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja: | deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > $(BUILD).configure.log 2>&1 \
	  || { cat $(BUILD).configure.log; exit 1; }

build: deps $(BUILD)/build.ninja
	@bash -o pipefail -c 'cmake --build $(BUILD) -j $(JOBS) 2>&1 | { grep -v "^\[" || true; }'
	@test -x $(BUILD)/bin/orthojit

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

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
	rm -rf $(BUILD) $(BUILD).configure.log
