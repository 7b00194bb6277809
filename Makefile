# The README's two commands: `make run` and `make test`. Each installs the
# missing Debian packages, builds, then runs the main sample or the tests.
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
JOBS ?= $(shell nproc)
SHARED ?= $(abspath ../shared)
# no "Entering directory" lines from the sub-makes cmake --build runs
MAKEFLAGS += --no-print-directory

.PHONY: all deps build run test test-fast test-asan test-tsan fuzz bench clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTLM_SHARED_DIR=$(SHARED) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

run: build
	$(BUILD)/samples/llm_serving --trace $(SHARED)/workloads/traces/AzureLLMInferenceTrace_conv.csv

# Whole suite, then the same suite under AddressSanitizer + UBSan, then the
# threaded tests under ThreadSanitizer, then each fuzz target for 15 s.
test: build
	cd $(BUILD) && ctest --output-on-failure -j2
	$(MAKE) test-asan
	$(MAKE) test-tsan
	@scripts/fuzz.sh 15

test-fast: build
	cd $(BUILD) && ctest --output-on-failure -j2

# -O2: at -O0 the reference checks of the convolution tests took most of
# the suite's time (AddressSanitizer asks for -O1 or more)
test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-O2 -g" \
	  -DTLM_SANITIZE=address,undefined \
	  -DTLM_BUILD_BENCH=OFF -DTLM_SHARED_DIR=$(SHARED) >/dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j2

# LLVM's own library is not instrumented: tests/tsan.supp silences it only.
# TLM_ASYNC=0 as under ctest (tests/CMakeLists.txt): these tests count and
# inspect builds call by call; test_async sets background builds itself.
TSAN_RUN = TLM_ASYNC=0 TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/tsan.supp"
test-tsan: deps
	@cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTLM_SANITIZE=thread \
	  -DTLM_BUILD_BENCH=OFF -DTLM_SHARED_DIR=$(SHARED) >/dev/null
	@cmake --build $(TSAN_BUILD) -j$(JOBS) --target test_pool test_cache test_bad_input test_async test_generic test_tune test_gpu_api fake_cuda tlm_cli
	$(TSAN_RUN) \
	  $(TSAN_BUILD)/tests/test_pool
	$(TSAN_RUN) \
	  $(TSAN_BUILD)/tests/test_cache $(TSAN_BUILD)
	$(TSAN_RUN) \
	  $(TSAN_BUILD)/tests/test_bad_input
	$(TSAN_RUN) \
	  $(TSAN_BUILD)/tests/test_async
	$(TSAN_RUN) \
	  $(TSAN_BUILD)/tests/test_generic
	$(TSAN_RUN) \
	  $(TSAN_BUILD)/tests/test_tune
	$(TSAN_RUN) \
	  $(TSAN_BUILD)/tests/test_gpu_api $(TSAN_BUILD)/tests/libfake_cuda.so

# libFuzzer targets (fuzz/README.md), FUZZ_SECONDS each
FUZZ_SECONDS ?= 600
fuzz: deps
	@scripts/fuzz.sh $(FUZZ_SECONDS)

bench: build
	$(BUILD)/bench/bench_matmul --json $(BUILD)/bench_matmul.json

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) build-fuzz
