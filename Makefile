# vfm build. `make` builds build/vfm and the test binaries; `make test` and `make demo` first
# install missing Debian packages (scripts/deps.sh), then build and run.
# CUDA sources compile whenever nvcc is found (NO_CUDA=1 turns that off); the binary still runs
# CPU-only on a machine without a GPU.

CC       ?= gcc
BUILD    ?= build
CFLAGS   ?= -O2
CFLAGS   += -std=c11 -Wall -Wextra -Werror -Wno-format-truncation -fopenmp -ffp-contract=off -D_GNU_SOURCE -Isrc -MMD -MP
LDLIBS   += -lopenblas -lyaml -ljansson -lsqlite3 -lm -lpthread
# pictures (libpng, libjpeg) for vfm prepare images; FFmpeg (video) is loaded at run time (dlopen)
LDLIBS   += -lpng16 -ljpeg -ldl
LDFLAGS  += -fopenmp
# OpenBLAS built for OpenMP shares our OpenMP threads; the pthread build would run its own pool
# next to ours and oversubscribe the cores (scripts/deps.sh installs libopenblas-openmp-dev).
OPENBLAS_OMP := /usr/lib/$(shell $(CC) -print-multiarch)/openblas-openmp
ifneq ($(wildcard $(OPENBLAS_OMP)/libopenblas.so),)
OPENBLAS_INC := -I/usr/include/$(shell $(CC) -print-multiarch)/openblas-openmp
OPENBLAS_LD  := -L$(OPENBLAS_OMP) -Wl,-rpath,$(OPENBLAS_OMP)
CFLAGS   += $(OPENBLAS_INC)
LDFLAGS  += $(OPENBLAS_LD)
endif

# MPI from Open MPI's compiler wrapper (or pkg-config) for everything; NO_MPI=1 builds without it
# (then only single-process runs work). NCCL (runtime-loaded) when nvcc and nccl.h are found.
MPICC    ?= $(shell command -v mpicc 2>/dev/null)
ifeq ($(NO_MPI),1)
MPICC    :=
endif
ifneq ($(MPICC),)
MPI_CFLAGS := -DVFM_MPI $(shell $(MPICC) --showme:compile 2>/dev/null || pkg-config --cflags ompi-c)
CFLAGS   += $(MPI_CFLAGS)
LDLIBS   += $(shell $(MPICC) --showme:link 2>/dev/null || pkg-config --libs ompi-c)
endif

NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_ARCH ?= -gencode=arch=compute_90a,code=sm_90a
ifeq ($(NO_CUDA),1)
NVCC :=
endif

CORE_SRC  := $(wildcard src/core/*.c) $(wildcard src/ops/*.c) $(wildcard src/model/*.c) \
             $(wildcard src/diffusion/*.c) $(wildcard src/train/*.c) $(wildcard src/data/*/*.c) \
             $(wildcard src/optim/*.c) $(wildcard src/plan/*.c) \
             $(wildcard src/parallel/*.c)
CPU_OPS   := $(wildcard src/ops/cpu/*.c)
CLI_SRC   := $(wildcard src/cli/*.c)
TEST_SRC  := $(wildcard tests/unit/*.c)
CUDA_SRC  := $(wildcard src/core/*.cu) $(wildcard src/ops/cuda/*.cu) $(wildcard src/parallel/*.cu)
MPI_TEST_SRC := $(wildcard tests/mpi/*.c)

LIB_OBJ   := $(CORE_SRC:%.c=$(BUILD)/%.o) $(CPU_OPS:%.c=$(BUILD)/%.f32.o) $(CPU_OPS:%.c=$(BUILD)/%.f64.o)
ifneq ($(NVCC),)
CFLAGS    += -DVFM_CUDA
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
LIB_OBJ   += $(CUDA_SRC:%.cu=$(BUILD)/%.cu.o)
LDFLAGS   += -L$(CUDA_HOME)/lib64
LDLIBS    += -lcudart_static -ldl -lrt -lstdc++
NVCCFLAGS ?= -O3 -std=c++17 -MMD -MP $(CUDA_ARCH) -Isrc -DVFM_CUDA -Xcompiler -Wall,-Werror,-Wno-format-truncation,-fPIC
NCCL_H    := $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h /usr/local/include/nccl.h))
ifneq ($(NCCL_H),)
CFLAGS    += -DVFM_NCCL
NVCCFLAGS += -DVFM_NCCL -I$(dir $(NCCL_H))
endif
# cuDNN attention: the one C++ file, over the header-only cudnn-frontend from PyPI (pinned), which
# scripts/deps.sh unpacks into the build folder on first use. cuBLASLt and cuDNN themselves are
# loaded at run time (src/ops/cuda/cuda_libs.h). NO_CUDNN_FE=1 builds without it (the reference
# attention kernel then runs every shape).
ifneq ($(NO_CUDNN_FE),1)
CUDNN_FE_VERSION := 1.32.0
CUDNN_FE_DIR := $(BUILD)/deps/cudnn-frontend-$(CUDNN_FE_VERSION)
CUDNN_FE_HDR := $(CUDNN_FE_DIR)/include/cudnn_frontend.h
NVCCFLAGS += -DVFM_CUDNN_FE
LIB_OBJ   += $(BUILD)/src/ops/cuda/cudnn_attention.o
CXX       ?= g++
CUDNN_FE_CXXFLAGS := -std=c++17 -O2 -fPIC -Wall -Wextra -Werror -DCUDNN_FRONTEND_SKIP_JSON_LIB -MMD -MP -Isrc \
             -isystem $(CUDNN_FE_DIR)/include -isystem $(CUDA_HOME)/include
endif
endif

.PHONY: all deps test demo clean goldens gpu-bundle gpu-check gpu-check2 cudnn-frontend fuzz harness
all: $(BUILD)/vfm $(BUILD)/vfm-faults $(BUILD)/vfm_tests $(BUILD)/vfm_mpi_tests

deps:
	@scripts/deps.sh

$(BUILD)/libvfm.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	ar rcs $@ $^

$(BUILD)/vfm: $(CLI_SRC:%.c=$(BUILD)/%.o) $(BUILD)/libvfm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The test build's fault injection (src/train/fault_hooks.h): build/vfm-faults is build/vfm with the
# VFM_TEST_* hooks live, for the tests that kill runs or break layouts; build/vfm has none. The
# object comes before libvfm.a, so its fault_hook_env is the one linked.
FAULTS_OBJ := $(BUILD)/faults/fault_hooks.o
$(FAULTS_OBJ): src/train/fault_hooks.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DVFM_FAULT_HOOKS -c $< -o $@

$(BUILD)/vfm-faults: $(CLI_SRC:%.c=$(BUILD)/%.o) $(FAULTS_OBJ) $(BUILD)/libvfm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# tests/alloc_wrap.c: the unit tests' allocator that fails on request (tests/unit/alloc_fail.h)
$(BUILD)/vfm_tests: $(TEST_SRC:%.c=$(BUILD)/%.o) $(filter-out $(BUILD)/src/cli/main.o,$(CLI_SRC:%.c=$(BUILD)/%.o)) $(FAULTS_OBJ) $(BUILD)/tests/alloc_wrap.o $(BUILD)/libvfm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/vfm_mpi_tests: $(MPI_TEST_SRC:%.c=$(BUILD)/%.o) $(BUILD)/tests/unit/test_util.o $(BUILD)/tests/unit/dit_pack.o $(FAULTS_OBJ) $(BUILD)/libvfm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

# The CPU ops' loops vectorise sqrt only without errno (nothing in them reads errno; IEEE sqrt is
# exact, so the bits do not change).
$(BUILD)/src/ops/cpu/%.o: CFLAGS += -fno-math-errno

$(BUILD)/%.f32.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.f64.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DVFM_REAL_F64 -c $< -o $@

$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

ifneq ($(CUDNN_FE_HDR),)
# about a minute of compiler time; rebuilt only when the wrapper or a header it includes changes
$(BUILD)/src/ops/cuda/cudnn_attention.o: src/ops/cuda/cudnn_attention.cpp | $(CUDNN_FE_HDR)
	@mkdir -p $(@D)
	$(CXX) $(CUDNN_FE_CXXFLAGS) -c $< -o $@

$(CUDNN_FE_HDR):
	@scripts/deps.sh --cudnn-frontend $(CUDNN_FE_VERSION) $(CUDNN_FE_DIR)

cudnn-frontend: $(CUDNN_FE_HDR)
endif

test:
	@scripts/deps.sh --test
	@$(MAKE) --no-print-directory all fuzz harness
	@tests/run_all.sh

demo: deps
	@$(MAKE) --no-print-directory all
	@scripts/demo.sh

# Fuzz targets (tests/fuzz/fuzz_NAME.c -> build/fuzz/NAME): libFuzzer with ASan and UBSan, built by clang
# from the library sources compiled again with the same flags (not from build/libvfm.a, which gcc
# builds without sanitizers). Only `make fuzz` and `make test` build them; tests/fuzz/run.sh runs
# them (docs/fuzzing.md). No -fopenmp: the targets run single-threaded (the pragmas are ignored; the
# few omp_* calls link to GCC's libgomp, which OpenBLAS uses too).
FUZZ_CC      ?= clang
FUZZ_DIR     := $(BUILD)/fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_CFLAGS  := -std=c11 -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Wno-source-uses-openmp -Wno-unknown-pragmas \
                -ffp-contract=off -D_GNU_SOURCE -Isrc \
                -MMD -MP $(FUZZ_SAN) -fsanitize=fuzzer-no-link $(OPENBLAS_INC)
FUZZ_LDFLAGS := -fsanitize=fuzzer $(FUZZ_SAN) $(OPENBLAS_LD)
FUZZ_LDLIBS   = $(filter-out -lcudart_static,$(LDLIBS)) -lgomp
FUZZ_NAMES   := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_LIB_OBJ := $(CORE_SRC:%.c=$(FUZZ_DIR)/obj/%.o) \
                $(CPU_OPS:%.c=$(FUZZ_DIR)/obj/%.f32.o) $(CPU_OPS:%.c=$(FUZZ_DIR)/obj/%.f64.o)

fuzz: $(FUZZ_NAMES:%=$(FUZZ_DIR)/%)
.PRECIOUS: $(FUZZ_DIR)/obj/tests/fuzz/%.o

$(FUZZ_DIR)/libvfm_fuzz.a: $(FUZZ_LIB_OBJ)
	@mkdir -p $(@D)
	@ar rcs $@ $^

$(FUZZ_DIR)/%: $(FUZZ_DIR)/obj/tests/fuzz/fuzz_%.o $(FUZZ_DIR)/libvfm_fuzz.a
	$(FUZZ_CC) $(FUZZ_LDFLAGS) -o $@ $^ $(FUZZ_LDLIBS)

$(FUZZ_DIR)/obj/tests/fuzz/%.o: tests/fuzz/%.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Werror -c $< -o $@

$(FUZZ_DIR)/obj/%.f64.o: %.c
	@mkdir -p $(@D)
	@$(FUZZ_CC) $(FUZZ_CFLAGS) -DVFM_REAL_F64 -c $< -o $@

$(FUZZ_DIR)/obj/%.f32.o: %.c
	@mkdir -p $(@D)
	@$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

$(FUZZ_DIR)/obj/%.o: %.c
	@mkdir -p $(@D)
	@$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

# The GPU machine has no package registry: gpu-bundle (here, scripts/gpu_bundle.sh) packs the
# binaries and the shared libraries they need that a GPU machine may lack (never glibc, libstdc++ or
# libgcc_s) into build/gpu-bundle.tgz, the one path a GPU session carries; there,
# scripts/gpu_check.sh (and gpu_check2.sh) unpack it and run the GPU checks without building, every
# log in one archive. scripts/gpu_run.sh puts on the library path only the carried libraries that
# machine lacks; vfm itself finds cuBLASLt, cuDNN, NVRTC and NCCL (core/lib_search.h).
gpu-bundle: all
	@BUILD=$(BUILD) scripts/gpu_bundle.sh

gpu-check:
	@scripts/gpu_check.sh

gpu-check2:
	@scripts/gpu_check2.sh

# Regenerates tests/fixtures/golden/*.bin (ops and models) with the PyTorch twin (needs python3-torch; not run by CI).
goldens:
	@scripts/deps.sh --goldens
	/usr/bin/python3 reference/ops_golden.py --out tests/fixtures/golden
	/usr/bin/python3 reference/model_golden.py --out tests/fixtures/golden
	/usr/bin/python3 reference/moviegen_golden.py --out tests/fixtures/golden
	/usr/bin/python3 reference/stdit_golden.py --out tests/fixtures/golden

clean:
	rm -rf $(BUILD)

# The CUDA kernels on the CPU, and the cuBLASLt and cuDNN stand-ins: `make harness` (make test)
include tests/harness/harness.mk

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
