/* Commands that later milestones fill in. Each answers --help and otherwise says plainly that
 * it is not implemented yet (exit 2). */
#include <stdio.h>
#include <string.h>

#include "commands.h"

static int stub(const char *name, const char *usage, int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: vfm %s\n\nnot implemented yet in this version of vfm.\n", usage);
            return 0;
        }
    return cli_not_implemented(name);
}

int cmd_bench(int argc, char **argv) { return stub("bench", "bench --preset NAME --seq N", argc, argv); }
