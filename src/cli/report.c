/* How every command reports a failed status (commands.h). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "core/error.h"

int cli_report(int status) {
    if (status == VFM_OK) return 0;
    const char *msg = vfm_last_error();
    fprintf(stderr, "%s%s\n", strncmp(msg, "vfm ", 4) == 0 ? "" : "vfm: ", msg);
    return vfm_exit_code((vfm_status)status);
}
