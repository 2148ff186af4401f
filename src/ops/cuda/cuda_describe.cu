// The report `vfm version` prints about the GPU libraries (ops_cuda.h): each run-time loaded
// library (cuda_libs.cu) and the cuDNN attention wrapper built in (cudnn_attention.cpp).
#include <stdio.h>

#include "cuda_libs.h"
#include "ops_cuda.h"

#ifdef VFM_CUDNN_FE
extern "C" const char *cudnn_attention_frontend_version(void);
#endif

extern "C" const char *cuda_describe_libraries(void) {
    static char buf[CUDA_LIB_COUNT * 4096 + 256];  // each library not loaded lists where it looked
    size_t n = cuda_libs_describe(buf, sizeof buf);
#ifdef VFM_CUDNN_FE
    snprintf(buf + n, sizeof buf - n, "cuDNN attention: cudnn-frontend %s (headers built in)\n",
             cudnn_attention_frontend_version());
#else
    snprintf(buf + n, sizeof buf - n, "cuDNN attention: not built (NO_CUDNN_FE): the reference kernel runs\n");
#endif
    return buf;
}
