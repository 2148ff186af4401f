/* FFmpeg for the video reader and the MP4 writer, loaded at run time (dlopen) rather than linked,
 * so binaries that never touch video (the GPU test bundle) do not carry FFmpeg's ~150 MiB of
 * libraries: av_api() opens Debian's libavformat / libavcodec / libswscale / libavutil of the major
 * versions whose headers vfm was built with, and resolves every function vfm calls; call them as
 * A->avformat_open_input(...). Also: FFmpeg's log kept off the terminal (its last warning or error is
 * kept per thread, for our messages) and FFmpeg error codes as text. */
#ifndef VFM_DATA_AV_UTIL_H
#define VFM_DATA_AV_UTIL_H

#include <stddef.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

#include "core/error.h"

/* Every FFmpeg function vfm uses: X(library, function). */
#define AV_API_FUNCTIONS(X)                                                                                        \
    X(avutil, av_log_set_callback) X(avutil, av_strerror) X(avutil, av_frame_alloc) X(avutil, av_frame_free)       \
    X(avutil, av_frame_unref) X(avutil, av_frame_get_buffer) X(avutil, av_frame_make_writable)                     \
    X(avutil, av_pix_fmt_desc_get) X(avutil, av_display_rotation_get) X(avutil, av_d2q) X(avutil, av_dict_set)     \
    X(avutil, av_dict_free)                                                                                        \
    X(avcodec, avcodec_alloc_context3) X(avcodec, avcodec_free_context) X(avcodec, avcodec_parameters_to_context)  \
    X(avcodec, avcodec_parameters_from_context) X(avcodec, avcodec_open2) X(avcodec, avcodec_send_packet)          \
    X(avcodec, avcodec_receive_frame) X(avcodec, avcodec_send_frame) X(avcodec, avcodec_receive_packet)            \
    X(avcodec, avcodec_find_encoder_by_name) X(avcodec, avcodec_find_encoder) X(avcodec, av_packet_alloc)          \
    X(avcodec, av_packet_free) X(avcodec, av_packet_unref) X(avcodec, av_packet_rescale_ts)                        \
    X(avformat, avformat_open_input) X(avformat, avformat_find_stream_info) X(avformat, av_find_best_stream)       \
    X(avformat, av_read_frame) X(avformat, avformat_close_input) X(avformat, av_guess_sample_aspect_ratio)         \
    X(avformat, av_stream_get_side_data) X(avformat, avformat_alloc_output_context2) X(avformat, avformat_new_stream) \
    X(avformat, avio_open) X(avformat, avio_closep) X(avformat, avformat_write_header)                             \
    X(avformat, av_interleaved_write_frame) X(avformat, av_write_trailer) X(avformat, avformat_free_context)       \
    X(swscale, sws_getCachedContext) X(swscale, sws_getContext) X(swscale, sws_setColorspaceDetails)               \
    X(swscale, sws_getCoefficients) X(swscale, sws_scale) X(swscale, sws_freeContext)

#define AV_API_FIELD(lib, fn) __typeof__(&fn) fn;
typedef struct {
    AV_API_FUNCTIONS(AV_API_FIELD)
} AvApi;
#undef AV_API_FIELD

/* The loaded API (thread-safe; loads once). NULL with a message naming the library that could not be
 * opened or the function that is missing (VFM_ERR_UNSUPPORTED from av_api_status). */
const AvApi *av_api(void);
vfm_status av_api_status(void);
/* "libavformat.so.59, libavcodec.so.59, libswscale.so.6, libavutil.so.57" */
const char *av_api_libraries(void);

/* "<av_strerror text>" plus, when FFmpeg logged one on this thread since av_util_clear, its last
 * message ("Invalid data found when processing input (moov atom not found)"). */
const char *av_util_error(int err, char *buf, size_t n);
void av_util_clear(void);

#endif
