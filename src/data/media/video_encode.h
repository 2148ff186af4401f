/* MP4 files for people to watch, through Debian's FFmpeg libraries (loaded at run time,
 * av_util.h): H.264 from libx264 (Debian's FFmpeg has it; CRF 18, preset medium, yuv420p, one
 * thread so the bytes are reproducible) and MPEG-4 part 2 (FFmpeg's own encoder, qscale 2) when
 * libx264 is missing. BT.601 limited range, tagged as such. A frame of odd width or height is
 * padded to even by repeating its last column or row (4:2:0 needs even sides). Written to
 * "<path>.tmp", fsynced and renamed over <path>. */
#ifndef VFM_DATA_VIDEO_ENCODE_H
#define VFM_DATA_VIDEO_ENCODE_H

#include "core/error.h"
#include "data/media/image_io.h"

/* n >= 1 equally sized frames at fps (> 0, fractions allowed). *codec (may be NULL) gets the
 * encoder used: "libx264" or "mpeg4". */
vfm_status mp4_write_rgb(const char *path, const RgbImage *frames, int n, double fps, const char **codec);

/* The encoder mp4_write_rgb would use in this build ("libx264" or "mpeg4"), or NULL when neither. */
const char *mp4_encoder_name(void);

#endif
