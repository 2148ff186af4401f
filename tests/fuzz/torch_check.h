/* Shared by the zip and pickle fuzz targets: the torch container readers on top of them
 * (src/data/formats/torch_tensor.c): one tensor decoded and converted to f32, and a state dict, each
 * checked against its own description. */
#ifndef VFM_FUZZ_TORCH_CHECK_H
#define VFM_FUZZ_TORCH_CHECK_H

#include <string.h>

#include "data/formats/torch_tensor.h"
#include "fuzz.h"

static inline void fuzz_check_tensor(const TorchTensor *t, const char *name) {
    FUZZ_CHECK(t->ndim >= 0 && t->ndim <= TORCH_MAX_DIMS, "%s: ndim %d", name, t->ndim);
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        FUZZ_CHECK(t->shape[d] >= 0, "%s: dimension %d is %lld", name, d, (long long)t->shape[d]);
        FUZZ_CHECK(!__builtin_mul_overflow(numel, t->shape[d], &numel), "%s: numel overflows", name);
    }
    FUZZ_CHECK(numel == t->numel, "%s: numel %lld, shape gives %lld", name, (long long)t->numel, (long long)numel);
    FUZZ_CHECK(t->data != NULL, "%s: no data", name);
    fuzz_touch(t->data, (size_t)numel * (size_t)torch_dtype_size(t->dtype));
}

static inline void fuzz_torch_readers(const uint8_t *data, size_t size, const char *what) {
    TorchTensor t;
    if (torch_tensor_decode(data, size, what, &t) == VFM_OK) {
        fuzz_check_tensor(&t, what);
        float *f = malloc((size_t)(t.numel ? t.numel : 1) * sizeof(float));
        FUZZ_CHECK(f != NULL, "out of memory");
        torch_tensor_to_f32(&t, f);
        fuzz_touch(f, (size_t)t.numel * sizeof(float));
        free(f);
        torch_tensor_free(&t);
    }
    TorchStateDict sd;
    if (torch_load_state_dict_memory(data, size, what, &sd) == VFM_OK) {
        FUZZ_CHECK(sd.n >= 0 && sd.n_skipped >= 0, "%lld tensors, %lld skipped", (long long)sd.n, (long long)sd.n_skipped);
        for (int64_t i = 0; i < sd.n; i++) {
            FUZZ_CHECK(sd.names[i] != NULL, "tensor %lld has no name", (long long)i);
            fuzz_check_tensor(&sd.tensors[i], sd.names[i]);
            int64_t found = torch_state_dict_find(&sd, sd.names[i]);
            FUZZ_CHECK(found >= 0 && strcmp(sd.names[found], sd.names[i]) == 0, "find('%s') = %lld", sd.names[i],
                       (long long)found);
        }
        torch_state_dict_free(&sd);
    }
}

#endif
