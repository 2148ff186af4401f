// The CPU harness: switching between the threads of a block (launch.cpp). On x86-64 a switch saves
// the callee-saved registers and the stack pointer and loads the other thread's — no system call,
// unlike swapcontext, whose signal-mask call would cost more than most kernels' work between two
// barriers. Elsewhere: ucontext.
#ifndef VFM_HARNESS_FIBER_H
#define VFM_HARNESS_FIBER_H

#include <stddef.h>

#if defined(__x86_64__)
struct FiberContext {
    void *sp;
};
extern "C" void vfm_harness_fiber_switch(void **save_sp, void *load_sp);
// Saves the running context into from and continues to.
static inline void fiber_switch(FiberContext *from, FiberContext *to) { vfm_harness_fiber_switch(&from->sp, to->sp); }
// A context that starts entry (which must never return) on [stack, stack + bytes).
static inline void fiber_make(FiberContext *c, char *stack, size_t bytes, void (*entry)(void)) {
    void **sp = (void **)(((size_t)(stack + bytes) & ~(size_t)15) - 64);  // 16-aligned: entry sees a call's alignment
    for (int i = 0; i < 6; i++) sp[i] = 0;  // r15, r14, r13, r12, rbx, rbp
    sp[6] = (void *)entry;                  // the switch's ret goes here
    sp[7] = 0;                              // entry's own return address: never used
    c->sp = sp;
}
#else
#include <ucontext.h>
struct FiberContext {
    ucontext_t uc;
};
static inline void fiber_switch(FiberContext *from, FiberContext *to) { swapcontext(&from->uc, &to->uc); }
static inline void fiber_make(FiberContext *c, char *stack, size_t bytes, void (*entry)(void)) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = bytes;
    c->uc.uc_link = NULL;
    makecontext(&c->uc, entry, 0);
}
#endif

#endif
