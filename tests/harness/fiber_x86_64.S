// vfm_harness_fiber_switch(void **save_sp, void *load_sp): the context switch of tests/harness/fiber.h.
#if defined(__x86_64__)
    .text
    .globl vfm_harness_fiber_switch
    .type vfm_harness_fiber_switch, @function
vfm_harness_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size vfm_harness_fiber_switch, .-vfm_harness_fiber_switch
#endif
    .section .note.GNU-stack,"",@progbits
