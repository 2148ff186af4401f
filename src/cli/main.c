/* Entry point of the vfm binary. */
#include "commands.h"
#include "ops/ops.h"

int main(int argc, char **argv) {
    ops_blas_pick_core(argv); /* may run vfm again with OpenBLAS's kernels for this CPU */
    return vfm_main(argc, argv);
}
