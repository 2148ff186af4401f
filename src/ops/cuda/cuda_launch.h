// The one way vfm launches a CUDA kernel. `<<<…>>>` is written only here, so that the same sources
// also compile as host C++: the CPU harness of the tests (tests/harness/device.h, included first)
// defines VFM_KERNEL_LAUNCH to run the blocks on the CPU with the same grid, block and shared-memory
// sizes. A macro rather than rewriting the launches at build time: one source text for nvcc and the
// harness, nothing generated, and one place where every launch is checked (CUDA_LAUNCH in
// cuda_common.h). A kernel name holding a comma (template arguments) is written in parentheses.
#ifndef VFM_CUDA_LAUNCH_H
#define VFM_CUDA_LAUNCH_H

#ifndef VFM_KERNEL_LAUNCH
#define VFM_KERNEL_LAUNCH(kernel, grid, block, shmem, stream, ...) kernel<<<grid, block, shmem, stream>>>(__VA_ARGS__)
#endif

// Deliberate defects for the harness's must-fail runs (tests/harness/must_fail.sh builds the CUDA
// sources again with -DVFM_HARNESS_BREAK=<one of these>); 0, none, everywhere else.
#define BREAK_OFF_BY_ONE 1    // norm.cu: RMSNorm reads one element past its row
#define BREAK_NO_BARRIER 2    // cuda_common.h: block_sum without the barrier before warp 0 adds
#define BREAK_GEMM_LD 3       // linear.cu: the forward GEMM's A told a leading dimension one short
#define BREAK_RAGGED_BYTES 4  // attention.cu: cuDNN's ragged offsets in bytes instead of elements
#define BREAK_VECTOR_TAIL 5   // cuda_common.h chunk_read (built into activations.cu): a short last chunk read
                              // with a 16-byte access, past the end of the array
#ifndef VFM_HARNESS_BREAK
#define VFM_HARNESS_BREAK 0
#endif

#endif
