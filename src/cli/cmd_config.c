/* vfm config show: prints the merged configuration (placeholder until the config registry lands). */
#include "commands.h"

int cmd_config(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_not_implemented("config");
}
