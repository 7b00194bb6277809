# The README's two commands: `make run` and `make test`. Each installs the
# missing Debian packages, builds, then runs the main sample or the tests.
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)
SHARED ?= $(abspath ../shared)

.PHONY: all deps build run test test-fast test-asan bench clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTLM_SHARED_DIR=$(SHARED) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

run: build
	$(BUILD)/samples/llm_serving --trace $(SHARED)/workloads/traces/AzureLLMInferenceTrace_conv.csv

# Whole suite, then the same suite under AddressSanitizer + UBSan.
test: build
	cd $(BUILD) && ctest --output-on-failure -j2
	$(MAKE) test-asan

test-fast: build
	cd $(BUILD) && ctest --output-on-failure -j2

test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DTLM_SANITIZE=address,undefined \
	  -DTLM_BUILD_BENCH=OFF -DTLM_SHARED_DIR=$(SHARED) >/dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j2

bench: build
	$(BUILD)/bench/bench_matmul --json $(BUILD)/bench_matmul.json

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
