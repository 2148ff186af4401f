/* Fuzz target: the safetensors reader (src/data/formats/safetensors.c) on a memory buffer: the header, every
 * tensor's name, dtype and shape, every tensor read as f32, and a metadata lookup. */
#include <string.h>

#include "data/formats/safetensors.h"
#include "fuzz.h"

FUZZ_QUIET_INITIALIZE

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    SafetensorsFile *f;
    if (safetensors_open_memory(&f, data, size, "fuzz.safetensors") != VFM_OK) return 0;
    int n = safetensors_count(f);
    FUZZ_CHECK(n >= 0, "count %d", n);
    for (int i = 0; i < n; i++) {
        const char *name = safetensors_name(f, i);
        FUZZ_CHECK(name != NULL, "tensor %d has no name", i);
        int found = safetensors_find(f, name);
        FUZZ_CHECK(found >= 0 && found <= i, "find('%s') = %d for tensor %d", name, found, i);
        DType dtype;
        int ndim;
        int64_t shape[VFM_MAX_DIMS];
        FUZZ_CHECK(safetensors_info(f, i, &dtype, &ndim, shape) == VFM_OK, "info of tensor %d", i);
        FUZZ_CHECK(ndim >= 0 && ndim <= VFM_MAX_DIMS, "tensor %d: ndim %d", i, ndim);
        /* a tensor the reader accepted has its bytes inside the file: numel · dtype size <= size */
        uint64_t numel = 1;
        for (int d = 0; d < ndim; d++) {
            FUZZ_CHECK(shape[d] >= 0, "tensor '%s': dimension %d is %lld", name, d, (long long)shape[d]);
            FUZZ_CHECK(!__builtin_mul_overflow(numel, (uint64_t)shape[d], &numel), "tensor '%s': numel overflows", name);
        }
        uint64_t bytes;
        FUZZ_CHECK(!__builtin_mul_overflow(numel, (uint64_t)dtype_size(dtype), &bytes) && bytes <= size,
                   "tensor '%s': %llu elements of %s do not fit a %zu-byte file", name, (unsigned long long)numel,
                   dtype_name(dtype), size);
        float *out = malloc(numel ? numel * sizeof(float) : 1);
        FUZZ_CHECK(out != NULL, "out of memory");
        if (safetensors_read_f32(f, i, out, (int64_t)numel) == VFM_OK) fuzz_touch(out, numel * sizeof(float));
        free(out);
    }
    const char *v = safetensors_metadata(f, "format");
    if (v) fuzz_touch(v, strlen(v));
    safetensors_close(f);
    return 0;
}
