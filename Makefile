# Makefile for the sentiment SQLite extension.
#
#   make            build/libsentiment_model.a, build/sentiment.so
#   make test       build and run every test (exits non-zero on any failure)
#   make asan       the same suite under AddressSanitizer + UBSan (build-asan/)
#   make demo       classify example sentences through the sqlite3 shell
#   make wheel      the Python package: build/wheel/sqlite_sentiment-*.whl (python/)
#   make bench      benchmarks (not tests)
#
# Missing Debian packages are installed by scripts/install-deps.sh when run as
# root, once per build directory and before anything compiles (every object
# waits for the $(BUILD)/.deps-ok stamp; `make deps` checks again). Shipped
# flags: -O2, no -march=native, no fast-math.

BUILD    ?= build
CC       ?= cc
OPT      ?= -O2
CFLAGS   ?= $(OPT) -g
CFLAGS   += -std=gnu11 -Wall -Wextra -fPIC -fvisibility=hidden -fopenmp
CPPFLAGS += -Imodel -Iext
LDLIBS   += -lutf8proc -lcjson -ljansson -lm -lpthread -ldl
SAN      ?=

MODEL_SRC := $(sort $(wildcard model/*.c))
EXT_SRC   := $(sort $(wildcard ext/*.c))
TEST_SRC  := $(sort $(wildcard tests/test_*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c))

MODEL_OBJ := $(MODEL_SRC:%.c=$(BUILD)/%.o)
EXT_OBJ   := $(EXT_SRC:%.c=$(BUILD)/%.o)
TEST_BIN  := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
LIB       := $(BUILD)/libsentiment_model.a
EXT_LIB   := $(BUILD)/libsentiment_ext.a
SO        := $(if $(EXT_SRC),$(BUILD)/sentiment.so)

.PHONY: all deps test asan demo bench clean builtin-model wheel
all: $(LIB) $(SO) $(BUILD)/train_builtin

# The packages first: under make -j a compile must not start before the
# headers it includes are installed. An order-only prerequisite, so a
# rebuild neither waits on dpkg nor recompiles when the stamp is new.
DEPS_OK := $(BUILD)/.deps-ok
$(DEPS_OK): scripts/install-deps.sh
	@./scripts/install-deps.sh
	@mkdir -p $(dir $@) && touch $@

deps:
	@./scripts/install-deps.sh
	@mkdir -p $(BUILD) && touch $(DEPS_OK)

$(BUILD)/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SAN) -MMD -MP -c $< -o $@

$(LIB): $(MODEL_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The built-in model is embedded with .incbin: rebuild when its files change.
$(BUILD)/ext/builtin.o: $(wildcard model/builtin/config.json model/builtin/vocab.txt model/builtin/model.safetensors)
# sentiment_debug() names the commit it was built from.
$(BUILD)/ext/functions.o: CPPFLAGS += -DSENTIMENT_COMMIT='"$(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)"'

$(EXT_LIB): $(EXT_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/sentiment.so: $(EXT_OBJ) $(LIB)
	$(CC) $(CFLAGS) $(SAN) -shared -o $@ $(EXT_OBJ) $(LIB) $(LDLIBS)

# Tests link the extension and model libraries (as archives, so a test pulls
# in only the objects it uses) and SQLite.
$(BUILD)/tests/%: tests/%.c $(LIB) $(if $(EXT_SRC),$(EXT_LIB)) $(wildcard tests/*.h) | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) $(SAN) $< -o $@ $(if $(EXT_SRC),$(EXT_LIB)) $(LIB) -lcmocka -lsqlite3 $(LDLIBS)

# The built-in model's trainer (see model/builtin/README.md).
BUILTIN_TRAINER_SRC := $(sort $(wildcard model/builtin/*.c))
$(BUILD)/train_builtin: $(BUILTIN_TRAINER_SRC) $(wildcard model/builtin/*.h) $(LIB) | $(DEPS_OK)
	$(CC) $(CPPFLAGS) -Imodel/builtin $(CFLAGS) $(SAN) $(BUILTIN_TRAINER_SRC) -o $@ $(LIB) $(LDLIBS)

builtin-model: $(DEPS_OK) $(BUILD)/train_builtin
	$(BUILD)/train_builtin --data ../shared/data --out model/builtin

$(BUILD)/bench/%: bench/%.c $(LIB) | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SAN) $< -o $@ $(LIB) $(LDLIBS)

test: all $(TEST_BIN)
	@BUILD=$(BUILD) SAN="$(SAN)" ./scripts/run-tests.sh $(TEST_BIN)
	@BUILD=$(BUILD) SAN="$(SAN)" ./scripts/test-scaleout.sh

# The Python package (python/README.md): sentiment.so, the CUDA plugin when
# built, and the shared libraries they need that the manylinux base lacks,
# with RUNPATH $$ORIGIN (patchelf). The version is SX_VERSION, the one the C
# side reports. scripts/test-wheel.sh installs it into a fresh venv and runs
# python/tests (part of make test when Debian's python3 can).
VERSION  := $(shell sed -n 's/^\#define SX_VERSION "\(.*\)"$$/\1/p' ext/sentiment_ext.h)
PYTHON   ?= python3
PATCHELF ?= patchelf
wheel: $(SO) cuda
	$(PYTHON) python/build_wheel.py --so $(SO) --version $(VERSION) --out $(BUILD)/wheel \
	    $(if $(CUDA_SO),--cuda $(CUDA_SO)) --patchelf $(PATCHELF)

asan:
	$(MAKE) BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" test

demo: all
	@./scripts/demo.sh

bench: all $(BENCH_BIN)
	@./scripts/bench.sh

clean:
	rm -rf build build-asan

-include $(MODEL_OBJ:.o=.d) $(EXT_OBJ:.o=.d)

# Fuzz the file parsers with libFuzzer (clang): FUZZ_SECONDS per target.
FUZZ_SECONDS ?= 60
.PHONY: fuzz
fuzz:
	@./scripts/fuzz.sh $(FUZZ_SECONDS)

# The CUDA plugin (gpu/, see gpu/README.md): build/sentiment_cuda.so, built
# with nvcc when nvcc is on PATH or in /usr/local/cuda/bin (not for sanitizer
# builds), a note otherwise.
# sentiment.so never links CUDA; it dlopens this plugin when a GPU is asked
# for. SASS for sm_80 (A100, and every 8.x GPU) and sm_90 (H100/H200) plus
# compute_90 PTX that newer GPUs compile at load time. cudart is linked
# statically (the plugin needs only the driver); cuBLAS dynamically.
#   make gpu-check   build, run the CUDA tests and the GPU benchmark (a GPU machine)
NVCC       ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH  ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
              -gencode arch=compute_90,code=compute_90
NVCCFLAGS  ?= -O2 -g -std=c++17 $(CUDA_ARCH) -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra
CUDA_SO    := $(if $(NVCC),$(if $(SAN),,$(BUILD)/sentiment_cuda.so))
GPU_CU     := $(sort $(wildcard gpu/*.cu))
GPU_OBJ    := $(GPU_CU:%.cu=$(BUILD)/%.cu.o) $(BUILD)/gpu/scatter_plan.o
GPU_HDR    := $(wildcard gpu/*.h gpu/*.cuh) model/backend.h model/errors.h model/dropout_rng.h

.PHONY: cuda gpu-check
all: cuda
ifeq ($(CUDA_SO),)
cuda:
	@echo "note: $(BUILD)/sentiment_cuda.so not built ($(if $(SAN),sanitizer build,nvcc not on PATH)); sentiment.so runs on the CPU"
else
cuda: $(CUDA_SO)
endif

$(BUILD)/gpu/%.cu.o: gpu/%.cu $(GPU_HDR)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Imodel -Igpu -c $< -o $@

$(BUILD)/sentiment_cuda.so: $(GPU_OBJ) gpu/exports.map
	$(NVCC) $(CUDA_ARCH) -shared -cudart static -o $@ $(GPU_OBJ) -lcublas \
	    -Xlinker --version-script=gpu/exports.map -Xlinker -rpath,$(CUDA_HOME)/lib64 \
	    -Xlinker --no-undefined

-include $(BUILD)/gpu/scatter_plan.d

gpu-check:
	@./scripts/gpu-check.sh
