/* What the backends share on the host (comm_internal.h): the comm's scratch, and the host
 * definition of the ordered sum. */
#include <stdlib.h>

#include "parallel/comm_internal.h"

vfm_status comm_scratch(Comm *c, size_t bytes, void **out) {
    if (bytes > c->impl->scratch_bytes) {
        unsigned char *p = realloc(c->impl->scratch, bytes);
        if (!p) return vfm_fail(VFM_ERR_NOMEM, "comm %s: %zu bytes of scratch", c->name, bytes);
        c->impl->scratch = p;
        c->impl->scratch_bytes = bytes;
    }
    *out = c->impl->scratch;
    return VFM_OK;
}

#define SUM_ROWS(T)                                                        \
    do {                                                                   \
        T *d = (T *)dst;                                                   \
        const T *r = (const T *)rows;                                      \
        for (int64_t i = 0; i < count; i++) {                              \
            T acc = r[i];                                                  \
            for (int k = 1; k < n_rows; k++) acc = (T)(acc + r[(int64_t)k * count + i]); \
            d[i] = acc;                                                    \
        }                                                                  \
    } while (0)

vfm_status comm_sum_rows_ordered(void *dst, const void *rows, int n_rows, int64_t count, DType dt) {
    switch (dt) {
    case DT_F32: SUM_ROWS(float); return VFM_OK;
    case DT_F64: SUM_ROWS(double); return VFM_OK;
    case DT_I32: SUM_ROWS(int32_t); return VFM_OK;
    case DT_I64: SUM_ROWS(int64_t); return VFM_OK;
    case DT_BF16: { /* each addition rounded to bf16, as the device's bf16 add (comm_nccl.cu): the f32 sum
                     * of two bf16 values rounded to bf16 is their correctly rounded bf16 sum */
        uint16_t *d = (uint16_t *)dst;
        const uint16_t *r = (const uint16_t *)rows;
        for (int64_t i = 0; i < count; i++) {
            uint16_t acc = r[i];
            for (int k = 1; k < n_rows; k++) acc = bf16_from_f32(f32_from_bf16(acc) + f32_from_bf16(r[(int64_t)k * count + i]));
            d[i] = acc;
        }
        return VFM_OK;
    }
    default: /* a sum left undone would hand every rank its own rows back as the result */
        return vfm_fail(VFM_ERR_INTERNAL, "ordered sum over ranks: dtype %s is not supported (f32, f64, i32, i64, bf16)",
                        dtype_name(dt));
    }
}
