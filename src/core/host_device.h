/* VFM_HD marks a small function written once for the CPU and the GPU: a host+device inline under
 * nvcc, a static inline function in C. */
#ifndef VFM_HOST_DEVICE_H
#define VFM_HOST_DEVICE_H

#ifdef __CUDACC__
#define VFM_HD __host__ __device__ __forceinline__
#else
#define VFM_HD static inline
#endif

#endif
