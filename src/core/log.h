/* Logging with levels and a rank prefix. Info goes to stdout, warnings and errors to stderr. */
#ifndef VFM_LOG_H
#define VFM_LOG_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 } LogLevel;

void log_set_level(LogLevel level);
LogLevel log_get_level(void);
/* Parses "error|warn|info|debug"; returns -1 when unknown. */
int log_level_from_string(const char *s);
/* With world > 1 every line starts "[rank R] ". */
void log_set_rank(int rank, int world);
void log_msg(LogLevel level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A rate for a log line with enough digits to show it: three significant ones below 100 ("0.0412",
 * "4.12", "41.2"), whole numbers from 100 ("1908"); returns out. */
const char *log_rate_text(double v, char *out, size_t n);

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#ifdef __cplusplus
}
#endif

#endif
