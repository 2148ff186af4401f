/* The tests' fault injection (kill after a step, kill during a save, kill one rank, poison a
 * gradient, break a layout: VFM_TEST_* variables, named where each hook sits) exists only in the
 * test build: build/vfm-faults and the test binaries link fault_hooks.c compiled with
 * VFM_FAULT_HOOKS; build/vfm, the binary users run, links it without, so there every hook reads
 * nothing and no environment can make a production run die or train wrong. */
#ifndef VFM_FAULT_HOOKS_H
#define VFM_FAULT_HOOKS_H

/* The value of the test variable `name` ("VFM_TEST_KILL_AFTER_STEP") in the test build; NULL in
 * build/vfm whatever the environment holds. */
const char *fault_hook_env(const char *name);

#endif
