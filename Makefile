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

demo: build
	@$(BUILD)/bin/orthojit demo

bench: build
	@$(BUILD)/bin/orthojit_bench --benchmark_min_time=0.2

clean:
	rm -rf $(BUILD) $(BUILD).configure.log
