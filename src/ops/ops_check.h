/* Argument checks shared by the op dispatchers: dtype, device and shape, with messages that
 * name the op, the argument and both shapes. Also the backend dispatch macros. */
#ifndef VFM_OPS_CHECK_H
#define VFM_OPS_CHECK_H

#include "cpu/ops_cpu.h"
#include "ops.h"
#include "ops_profile.h"
#ifdef VFM_CUDA
#include "cuda/ops_cuda.h"
#endif

/* t must exist, live on dev, have dtype and the listed dims (-1 = any size). */
vfm_status ops_expect(const char *op, const char *arg, const Tensor *t, DType dtype, Device dev, int ndim,
                      const int64_t *shape);
#define OPS_EXPECT(op, arg, t, dtype, dev, ...)                                                     \
    VFM_TRY(ops_expect((op), (arg), (t), (dtype), (dev),                                          \
                       (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}))
/* The float dtype an op runs in, taken from its reference tensor: f32/f64 on cpu, bf16/f32 on cuda. */
vfm_status ops_float_dtype(const char *op, const Tensor *t);
/* As ops_float_dtype, naming the argument in the message. */
vfm_status ops_float_arg(const char *op, const char *arg, const Tensor *t);
vfm_status ops_same_numel(const char *op, const char *a_name, const Tensor *a, const char *b_name, const Tensor *b);
/* The dtype an "[f32]" argument must have (ops.h's mixed-precision contract): f32 on cuda, the
 * call's dtype (that of its reference tensor ref) on the cpu. */
DType ops_f32_dtype(const Tensor *ref);
/* The dtype an ACT argument t must have in a call whose reference tensor is ref: ref's dtype on
 * the cpu; on cuda t's own dtype when it is bf16 or f32, else bf16 (so the message names it). */
DType ops_act_dtype(const Tensor *t, const Tensor *ref);
vfm_status ops_no_cuda(const char *op);
/* tok2sample i32 [S] on dev; on the CPU also checks every entry is -1 (padding) or a sample < B. */
vfm_status ops_check_tok2sample(const char *op, const Tensor *tok2sample, int64_t S, int64_t B, Device dev);

/* cpu_<name>_f32 / cpu_<name>_f64 by the reference tensor's dtype, as an expression. */
#define OPS_CPU_CALL(name, ref, ...) \
    ((ref)->dtype == DT_F64 ? cpu_##name##_f64(__VA_ARGS__) : cpu_##name##_f32(__VA_ARGS__))

/* return expr, timed as op `name` on dev while profiling is on (ops_profile.h). */
#define OPS_RETURN_PROFILED(name, dev, expr)                                   \
    do {                                                                       \
        if (!g_ops_profile_on) return (expr);                                  \
        OpsProfileMark ops_pm_;                                                \
        ops_profile_begin(&ops_pm_, #name, (dev));                             \
        vfm_status ops_ps_ = (expr);                                           \
        ops_profile_end(&ops_pm_);                                             \
        return ops_ps_;                                                        \
    } while (0)

/* Calls cpu_<name>_f32 / cpu_<name>_f64 by the reference tensor's dtype. */
#define OPS_DISPATCH_CPU(name, ref, ...) OPS_RETURN_PROFILED(name, DEV_CPU, OPS_CPU_CALL(name, ref, __VA_ARGS__))

/* The CPU backend, or "no CUDA kernel yet" for a GPU tensor. */
#define OPS_DISPATCH(name, ref, ...)                                           \
    do {                                                                       \
        if ((ref)->device == DEV_CUDA) return ops_no_cuda(#name);              \
        OPS_DISPATCH_CPU(name, ref, __VA_ARGS__);                              \
    } while (0)

/* As OPS_DISPATCH, for ops that have a CUDA kernel (cuda_<name>). */
#ifdef VFM_CUDA
#define OPS_DISPATCH_WITH_CUDA(name, ref, ...)                                 \
    do {                                                                       \
        if ((ref)->device == DEV_CUDA) OPS_RETURN_PROFILED(name, DEV_CUDA, cuda_##name(__VA_ARGS__)); \
        OPS_DISPATCH_CPU(name, ref, __VA_ARGS__);                              \
    } while (0)
#else
#define OPS_DISPATCH_WITH_CUDA(name, ref, ...) OPS_DISPATCH(name, ref, __VA_ARGS__)
#endif

#endif
