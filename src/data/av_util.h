/* What the FFmpeg-based readers and writers share: FFmpeg's log kept off the terminal (its last
 * warning or error is kept per thread, for our messages), and FFmpeg error codes as text. */
#ifndef VFM_DATA_AV_UTIL_H
#define VFM_DATA_AV_UTIL_H

#include <stddef.h>

/* Installs the log callback once (thread-safe); call before any other FFmpeg call. */
void av_util_init(void);
/* "<av_strerror text>" plus, when FFmpeg logged one on this thread since av_util_clear, its last
 * message ("Invalid data found when processing input (moov atom not found)"). */
const char *av_util_error(int err, char *buf, size_t n);
void av_util_clear(void);

#endif
