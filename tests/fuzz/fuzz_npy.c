/* Fuzz target: the `.npy` reader (src/data/formats/npy.c) on one input's bytes: the header alone, then the
 * whole array converted to f32 (every dtype, byte order and Fortran order). */
#include <string.h>

#include "data/formats/npy.h"
#include "fuzz.h"

FUZZ_QUIET_INITIALIZE

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    NpyArray a;
    size_t data_at = 0;
    if (npy_parse_header(data, size, "fuzz.npy", &a, &data_at) == VFM_OK) {
        FUZZ_CHECK(data_at <= size, "data offset %zu past %zu bytes", data_at, size);
        FUZZ_CHECK(a.ndim >= 0 && a.ndim <= NPY_MAX_DIMS, "ndim %d", a.ndim);
        int64_t numel = 1;
        for (int d = 0; d < a.ndim; d++) {
            FUZZ_CHECK(a.shape[d] >= 0, "dimension %d is %lld", d, (long long)a.shape[d]);
            numel *= a.shape[d];
        }
        FUZZ_CHECK(numel == a.numel, "numel %lld, shape gives %lld", (long long)a.numel, (long long)numel);
        FUZZ_CHECK(a.item_size == 1 || a.item_size == 2 || a.item_size == 4 || a.item_size == 8, "item size %d",
                   a.item_size);
    }
    if (npy_parse(data, size, "fuzz.npy", &a) == VFM_OK) {
        const uint8_t *end = data + size;
        FUZZ_CHECK(a.data >= data && (size_t)(end - a.data) / (size_t)a.item_size >= (size_t)a.numel,
                   "%lld elements of %d bytes do not fit the %zu input bytes", (long long)a.numel, a.item_size, size);
        fuzz_touch(a.data, (size_t)a.numel * (size_t)a.item_size);
    }
    Tensor t;
    if (npy_load_f32(data, size, "fuzz.npy", &t) == VFM_OK) {
        fuzz_touch(t.data, tensor_bytes(&t));
        tensor_free(&t);
    }
    return 0;
}
