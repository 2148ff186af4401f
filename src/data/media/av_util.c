/* FFmpeg loaded at run time, log capture and error text (see av_util.h). */
#include "data/media/av_util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define AV_STR2(x) #x
#define AV_STR(x) AV_STR2(x)
#define SONAME_avutil "libavutil.so." AV_STR(LIBAVUTIL_VERSION_MAJOR)
#define SONAME_avcodec "libavcodec.so." AV_STR(LIBAVCODEC_VERSION_MAJOR)
#define SONAME_avformat "libavformat.so." AV_STR(LIBAVFORMAT_VERSION_MAJOR)
#define SONAME_swscale "libswscale.so." AV_STR(LIBSWSCALE_VERSION_MAJOR)

static AvApi g_api;
static int g_loaded;
static char g_error[512];
static _Thread_local char g_last[256];

static void on_log(void *avcl, int level, const char *fmt, va_list ap) {
    (void)avcl;
    if (level > AV_LOG_WARNING) return;
    vsnprintf(g_last, sizeof g_last, fmt, ap);
    size_t n = strlen(g_last);
    while (n && (g_last[n - 1] == '\n' || g_last[n - 1] == ' ')) g_last[--n] = 0;
}

static void load(void) {
    void *h_avutil = dlopen(SONAME_avutil, RTLD_NOW | RTLD_LOCAL);
    void *h_avcodec = h_avutil ? dlopen(SONAME_avcodec, RTLD_NOW | RTLD_LOCAL) : NULL;
    void *h_avformat = h_avcodec ? dlopen(SONAME_avformat, RTLD_NOW | RTLD_LOCAL) : NULL;
    void *h_swscale = h_avformat ? dlopen(SONAME_swscale, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h_swscale) {
        snprintf(g_error, sizeof g_error, "video needs FFmpeg's libraries (%s): %s; scripts/deps.sh installs them",
                 av_api_libraries(), dlerror());
        return;
    }
#define AV_API_LOAD(lib, fn)                                                                          \
    if (!(*(void **)(&g_api.fn) = dlsym(h_##lib, #fn))) {                                             \
        snprintf(g_error, sizeof g_error, "%s has no function %s (FFmpeg of another version?)", SONAME_##lib, #fn); \
        return;                                                                                       \
    }
    AV_API_FUNCTIONS(AV_API_LOAD)
#undef AV_API_LOAD
    g_api.av_log_set_callback(on_log);
    g_loaded = 1;
}

const AvApi *av_api(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load);
    if (!g_loaded) {
        vfm_fail(VFM_ERR_UNSUPPORTED, "%s", g_error);
        return NULL;
    }
    return &g_api;
}

vfm_status av_api_status(void) { return av_api() ? VFM_OK : VFM_ERR_UNSUPPORTED; }

const char *av_api_libraries(void) { return SONAME_avformat ", " SONAME_avcodec ", " SONAME_swscale ", " SONAME_avutil; }

void av_util_clear(void) { g_last[0] = 0; }

const char *av_util_error(int err, char *buf, size_t n) {
    char text[AV_ERROR_MAX_STRING_SIZE] = "";
    const AvApi *A = av_api();
    if (A) A->av_strerror(err, text, sizeof text);
    if (g_last[0]) snprintf(buf, n, "%s (%s)", text, g_last);
    else snprintf(buf, n, "%s", text);
    return buf;
}
