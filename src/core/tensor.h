/* Tensor: a typed, shaped, contiguous (row-major) view of memory on one device.
 * A Tensor never owns implicitly: views are free; tensor_alloc/tensor_free own. */
#ifndef VFM_TENSOR_H
#define VFM_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VFM_MAX_DIMS 5

typedef enum { DT_F32 = 0, DT_F64 = 1, DT_BF16 = 2, DT_I32 = 3, DT_I64 = 4 } DType;
typedef enum { DEV_CPU = 0, DEV_CUDA = 1 } Device;

typedef struct Tensor {
    void *data;
    DType dtype;
    Device device;
    int ndim;
    int64_t shape[VFM_MAX_DIMS];
} Tensor;

size_t dtype_size(DType t);
const char *dtype_name(DType t);
const char *device_name(Device d);

Tensor tensor_make(void *data, DType dtype, Device device, int ndim, const int64_t *shape);
/* "[64,32]" (as jansson writes a JSON array), for messages. */
void tensor_shape_text(const int64_t *shape, int ndim, char *out, size_t n);
int64_t tensor_numel(const Tensor *t);
size_t tensor_bytes(const Tensor *t);
/* Size of dimension d, counting negative d from the end. */
int64_t tensor_dim(const Tensor *t, int d);
/* Rows when viewed as a matrix [rows, last dim]. */
int64_t tensor_rows(const Tensor *t);
/* "f32[3,4]@cpu" into buf. */
const char *tensor_describe(const Tensor *t, char *buf, size_t n);

/* A view of `data` with the listed dimensions: TENSOR(p, DT_F32, DEV_CPU, S, D). */
#define TENSOR(ptr, dtype, dev, ...)                                                      \
    tensor_make((ptr), (dtype), (dev), (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
                (int64_t[]){__VA_ARGS__})
#define TF32(ptr, ...) TENSOR((ptr), DT_F32, DEV_CPU, __VA_ARGS__)
#define TF64(ptr, ...) TENSOR((ptr), DT_F64, DEV_CPU, __VA_ARGS__)
#define TI32(ptr, ...) TENSOR((ptr), DT_I32, DEV_CPU, __VA_ARGS__)

/* Owning allocation (zero-filled). */
vfm_status tensor_alloc(Tensor *t, DType dtype, Device device, int ndim, const int64_t *shape);
void tensor_free(Tensor *t);

/* Copies between any two devices; shapes must have the same element count and dtype. */
vfm_status tensor_copy(Tensor *dst, const Tensor *src);

/* bf16 <-> f32 (round to nearest even; NaN stays NaN). */
uint16_t bf16_from_f32(float f);
float f32_from_bf16(uint16_t h);

/* Device memory (cpu: aligned malloc; cuda: cudaMalloc when built with CUDA). */
vfm_status device_malloc(Device dev, size_t bytes, void **out);
void device_free(Device dev, void *p);
vfm_status device_memcpy(void *dst, Device dst_dev, const void *src, Device src_dev, size_t bytes);
vfm_status device_memset0(Device dev, void *p, size_t bytes);
/* Number of usable CUDA GPUs; 0 without CUDA support or without a GPU. */
int device_cuda_count(void);
/* Waits until the device has finished the work queued on it (a no-op on the CPU). */
vfm_status device_synchronize(Device dev);

typedef struct DeviceMemory {
    size_t held, peak;  /* cuda: what vfm allocated, now and at most (since the last reset);
                         * cpu: the process's resident set, now and at most */
    size_t free, total; /* cuda: the device's free and total memory (every process); cpu: 0 */
} DeviceMemory;
vfm_status device_memory(Device dev, DeviceMemory *out);
/* Restarts the high-water mark at what is held now (cuda; the cpu peak cannot be reset). */
void device_memory_reset_peak(Device dev);

#ifdef __cplusplus
}
#endif
#endif
