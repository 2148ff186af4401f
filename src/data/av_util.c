/* FFmpeg log capture and error text (see av_util.h). */
#include "data/av_util.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <libavutil/error.h>
#include <libavutil/log.h>

static _Thread_local char g_last[256];

static void on_log(void *avcl, int level, const char *fmt, va_list ap) {
    (void)avcl;
    if (level > AV_LOG_WARNING) return;
    vsnprintf(g_last, sizeof g_last, fmt, ap);
    size_t n = strlen(g_last);
    while (n && (g_last[n - 1] == '\n' || g_last[n - 1] == ' ')) g_last[--n] = 0;
}

static void install(void) { av_log_set_callback(on_log); }

void av_util_init(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install);
}

void av_util_clear(void) { g_last[0] = 0; }

const char *av_util_error(int err, char *buf, size_t n) {
    char text[AV_ERROR_MAX_STRING_SIZE] = "";
    av_strerror(err, text, sizeof text);
    if (g_last[0]) snprintf(buf, n, "%s (%s)", text, g_last);
    else snprintf(buf, n, "%s", text);
    return buf;
}
