/* Leveled, rank-prefixed log lines; one fprintf per line so ranks do not interleave mid-line. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static LogLevel g_level = LOG_INFO;
static int g_rank = 0, g_world = 1;

void log_set_level(LogLevel level) { g_level = level; }
LogLevel log_get_level(void) { return g_level; }
void log_set_rank(int rank, int world) { g_rank = rank; g_world = world; }

int log_level_from_string(const char *s) {
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

void log_msg(LogLevel level, const char *fmt, ...) {
    if (level > g_level) return;
    char line[4096];
    size_t n = 0;
    if (g_world > 1) n += (size_t)snprintf(line, sizeof line, "[rank %d] ", g_rank);
    if (level == LOG_ERROR) n += (size_t)snprintf(line + n, sizeof line - n, "error: ");
    if (level == LOG_WARN) n += (size_t)snprintf(line + n, sizeof line - n, "warning: ");
    va_list ap;
    va_start(ap, fmt);
    if (n < sizeof line) vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    FILE *out = level <= LOG_WARN ? stderr : stdout;
    fprintf(out, "%s\n", line);
    fflush(out);
}

const char *log_rate_text(double v, char *out, size_t n) {
    if (!(v < 100)) snprintf(out, n, "%.0f", v);
    else snprintf(out, n, "%.3g", v);
    return out;
}
