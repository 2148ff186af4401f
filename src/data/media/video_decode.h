/* Reading video files through Debian's FFmpeg libraries (loaded at run time, av_util.h:
 * libavformat demuxes, libavcodec decodes, libswscale converts to RGB), resampled in time to a
 * target frame rate: output frame k is the source frame on screen at t = k / fps after the first
 * frame (the last one whose timestamp is at or before t), so a faster source drops frames and a
 * slower one repeats them. The clip ends with the last source frame's display time. Frames come
 * out as interleaved RGB, 8-bit (16-bit for sources of more than 8 bits), in the stream's colour
 * matrix and range (BT.601 when unspecified), turned upright when the stream has a rotation
 * (display matrix) of a multiple of 90 degrees. */
#ifndef VFM_DATA_VIDEO_DECODE_H
#define VFM_DATA_VIDEO_DECODE_H

#include "core/error.h"
#include "data/media/resample.h"

typedef struct {
    int width, height;   /* frame size as shown (after the rotation), in pixels */
    double pixel_aspect; /* displayed width of a pixel over its height (sample aspect ratio; 1 when unset) */
    double fps;          /* the stream's average frame rate, 0 when unknown */
    double duration;     /* seconds, 0 when unknown */
    int rotation;        /* 0, 90, 180 or 270: clockwise turn applied to every frame */
    char codec[32];      /* decoder name, e.g. "h264" */
} VideoInfo;

typedef struct VideoReader VideoReader;

/* Opens path and its best video stream. Errors (VFM_ERR_FORMAT, VFM_ERR_IO) name the file. */
vfm_status video_open(VideoReader **out, const char *path, VideoInfo *info);
/* The next output frame at `fps` (> 0): *got = 1 and *frame valid until the next call or video_close;
 * *got = 0 after the last. A decoding error is VFM_ERR_FORMAT naming the file and the frame. */
vfm_status video_next_frame(VideoReader *r, double fps, const PixelImage **frame, int *got);
void video_close(VideoReader *r);

#endif
