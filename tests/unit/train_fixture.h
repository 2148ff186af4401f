/* Test helper: a run of configs/tiny-mock.yaml into a run directory, quiet and on one thread,
 * with extra overrides. */
#ifndef VFM_TEST_TRAIN_FIXTURE_H
#define VFM_TEST_TRAIN_FIXTURE_H

#include "core/error.h"

vfm_status train_tiny_mock(const char *run, const char *const *extra, int n_extra);

#endif
