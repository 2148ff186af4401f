/* Entry point of the vfm binary. */
#include "commands.h"

int main(int argc, char **argv) { return vfm_main(argc, argv); }
