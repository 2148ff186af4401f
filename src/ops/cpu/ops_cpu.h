/* Declarations of the CPU backend: each op exists as cpu_<op>_f32 and cpu_<op>_f64 (see real.h)
 * with the same arguments as the public op in ops.h (the list: ops_backend.h). Arguments are
 * already checked by the dispatcher (ops_*.c), so these functions only compute. */
#ifndef VFM_OPS_CPU_H
#define VFM_OPS_CPU_H

#include "../ops_backend.h"

#define CPU_DECL(name, params)              \
    vfm_status cpu_##name##_f32 params;     \
    vfm_status cpu_##name##_f64 params;

OPS_BACKEND_LIST(CPU_DECL)

#endif
