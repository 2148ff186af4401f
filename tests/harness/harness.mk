# The CPU harness of the CUDA backend (docs/ops.md, "The CPU harness"), included by the Makefile.
# `make harness` (called by `make test`) compiles the real .cu sources a second time as host C++
# under AddressSanitizer, with tests/harness/device.h included first, and links them with the
# harness's CUDA runtime and library stand-ins (tests/harness/*.cpp), its own tests
# (tests/harness/test_*.cu) and the unit test objects into build/vfm_harness_tests; and, for the
# must-fail runs (tests/harness/must_fail.sh), one variant per deliberate defect, in which the
# source holding it is compiled with -DVFM_HARNESS_BREAK=<name> (src/ops/cuda/cuda_launch.h).
# The .cu files need only the CUDA headers, but they come with nvcc: without nvcc there is nothing
# to build (and the harness suites say so).

HARNESS_DIR := $(BUILD)/harness

ifneq ($(NVCC),)
HARNESS_CXXFLAGS := -x c++ -std=c++17 -g -O1 -fsanitize=address -fno-omit-frame-pointer -ffp-contract=off \
                    -Wall -Wextra -Werror -Wno-format-truncation -MMD -MP -Isrc -Itests/harness \
                    -isystem $(CUDA_HOME)/include -DVFM_CUDA -DVFM_CUDNN_FE \
                    $(if $(NCCL_H),-DVFM_NCCL -I$(dir $(NCCL_H))) \
                    $(MPI_CFLAGS)
# cuda_libs.cu loads the real libraries: the harness has its own (tests/harness/libs.cpp)
HARNESS_CU       := $(filter-out src/ops/cuda/cuda_libs.cu,$(CUDA_SRC)) $(wildcard tests/harness/test_*.cu)
HARNESS_CU_OBJ   := $(HARNESS_CU:%.cu=$(HARNESS_DIR)/obj/%.o)
HARNESS_RT_OBJ   := $(patsubst %.cpp,$(HARNESS_DIR)/obj/%.o,$(wildcard tests/harness/*.cpp)) \
                    $(patsubst %.S,$(HARNESS_DIR)/obj/%.o,$(wildcard tests/harness/*.S))
# everything else is the objects vfm_tests is linked from, less the CUDA ones
HARNESS_HOST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o) $(filter-out $(BUILD)/src/cli/main.o,$(CLI_SRC:%.c=$(BUILD)/%.o)) \
                    $(CORE_SRC:%.c=$(BUILD)/%.o) $(CPU_OPS:%.c=$(BUILD)/%.f32.o) $(CPU_OPS:%.c=$(BUILD)/%.f64.o)
HARNESS_LDLIBS   := $(filter-out -lcudart_static,$(LDLIBS))
HARNESS_LINK      = @echo "  link $@"; $(CXX) -fsanitize=address $(LDFLAGS) -o $@ $^ $(HARNESS_LDLIBS)

# name : switch : the source it breaks (the variant's object comes first on the link line, so that
# its copy of an inline function shared through a header is the one kept)
HARNESS_BREAKS := off_by_one:BREAK_OFF_BY_ONE:src/ops/cuda/norm.cu \
                  no_barrier:BREAK_NO_BARRIER:src/ops/cuda/attention_ref.cu \
                  gemm_ld:BREAK_GEMM_LD:src/ops/cuda/linear.cu \
                  ragged_bytes:BREAK_RAGGED_BYTES:src/ops/cuda/attention.cu \
                  vector_tail:BREAK_VECTOR_TAIL:src/ops/cuda/activations.cu
harness_word = $(word $(2),$(subst :, ,$(1)))
HARNESS_BREAK_BINS := $(foreach b,$(HARNESS_BREAKS),$(HARNESS_DIR)/break/$(call harness_word,$(b),1)/vfm_harness_tests)

# build/harness/vfm-faults: build/vfm-faults on the harness, for whole GPU runs on the CPU
# (tests/harness/gpu_runs.sh): the CLI with the fault hooks, the host objects, the .cu sources as
# above (not the harness's own tests) and the harness's runtime and stand-ins
HARNESS_VFM_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o) $(FAULTS_OBJ) \
                    $(filter-out $(BUILD)/src/train/fault_hooks.o,$(CORE_SRC:%.c=$(BUILD)/%.o)) \
                    $(CPU_OPS:%.c=$(BUILD)/%.f32.o) $(CPU_OPS:%.c=$(BUILD)/%.f64.o) \
                    $(filter-out $(HARNESS_DIR)/obj/tests/%,$(HARNESS_CU_OBJ)) \
                    $(filter-out %/test_standins.o,$(HARNESS_RT_OBJ))

# build/harness/vfm_mpi_tests: the multi-rank tests (tests/mpi/*.c) on the harness, for the GPU
# communication tests there (test_nccl.c through the NCCL stand-in, test_comm_staged.c)
HARNESS_MPI_OBJ  := $(MPI_TEST_SRC:%.c=$(BUILD)/%.o) $(BUILD)/tests/unit/test_util.o $(BUILD)/tests/unit/dit_pack.o \
                    $(filter-out $(CLI_SRC:%.c=$(BUILD)/%.o),$(HARNESS_VFM_OBJ))

harness: $(BUILD)/vfm_harness_tests $(HARNESS_DIR)/vfm-faults $(HARNESS_DIR)/vfm_mpi_tests $(HARNESS_BREAK_BINS)

$(HARNESS_DIR)/vfm-faults: $(HARNESS_VFM_OBJ)
	$(HARNESS_LINK)

$(HARNESS_DIR)/vfm_mpi_tests: $(HARNESS_MPI_OBJ)
	$(HARNESS_LINK)

$(BUILD)/vfm_harness_tests: $(HARNESS_CU_OBJ) $(HARNESS_RT_OBJ) $(HARNESS_HOST_OBJ)
	$(HARNESS_LINK)

$(HARNESS_DIR)/obj/%.o: %.cu
	@mkdir -p $(@D)
	$(CXX) $(HARNESS_CXXFLAGS) -include tests/harness/device.h -c $< -o $@

$(HARNESS_DIR)/obj/%.o: %.cpp
	@mkdir -p $(@D)
	$(CXX) $(HARNESS_CXXFLAGS) -c $< -o $@

$(HARNESS_DIR)/obj/%.o: %.S
	@mkdir -p $(@D)
	$(CC) -c $< -o $@

define harness_break_rules
$(HARNESS_DIR)/break/$(1)/$(notdir $(3:.cu=.o)): $(3)
	@mkdir -p $$(@D)
	$$(CXX) $$(HARNESS_CXXFLAGS) -DVFM_HARNESS_BREAK=$(2) -include tests/harness/device.h -c $$< -o $$@

$(HARNESS_DIR)/break/$(1)/vfm_harness_tests: $(HARNESS_DIR)/break/$(1)/$(notdir $(3:.cu=.o)) \
        $(filter-out $(HARNESS_DIR)/obj/$(3:.cu=.o),$(HARNESS_CU_OBJ)) $(HARNESS_RT_OBJ) $(HARNESS_HOST_OBJ)
	$$(HARNESS_LINK)
endef
$(foreach b,$(HARNESS_BREAKS),$(eval $(call harness_break_rules,$(call harness_word,$(b),1),$(call harness_word,$(b),2),$(call harness_word,$(b),3))))
else
harness:
	@echo "harness: no nvcc, so no CUDA headers: the CPU harness is not built"
endif
