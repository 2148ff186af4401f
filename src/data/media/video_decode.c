/* FFmpeg-based video reading with time resampling (see video_decode.h). */
#include "data/media/video_decode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/media/av_util.h"
#include "data/media/image_decode.h"

struct VideoReader {
    const AvApi *A;
    char path[1024];
    AVFormatContext *fmt;
    AVCodecContext *dec;
    struct SwsContext *sws;
    AVPacket *pkt;
    AVFrame *cur, *next; /* the frame on screen now, and the one after it (decoded ahead) */
    int have_cur, have_next, eof, sent_flush;
    double cur_t, next_t, t0, frame_dur; /* seconds */
    double time_base;
    int64_t decoded;   /* frames decoded */
    int64_t cur_index; /* decoded index of cur */
    int64_t k;         /* output frames handed out */
    int64_t converted; /* decoded index of the frame in rgb, -1 when none */
    int rotation;
    PixelImage rgb;
};

static vfm_status av_fail(const VideoReader *r, int err, const char *what) {
    char text[512];
    return vfm_fail(VFM_ERR_FORMAT, "%s: %s: %s", r->path, what, av_util_error(err, text, sizeof text));
}

void video_close(VideoReader *r) {
    if (!r) return;
    const AvApi *A = r->A;
    A->av_frame_free(&r->cur);
    A->av_frame_free(&r->next);
    A->av_packet_free(&r->pkt);
    A->avcodec_free_context(&r->dec);
    A->avformat_close_input(&r->fmt);
    A->sws_freeContext(r->sws);
    pixel_image_free(&r->rgb);
    free(r);
}

/* Clockwise degrees a viewer turns the frames by (from the stream's display matrix). */
static int stream_rotation(const AvApi *A, const AVStream *st) {
    const uint8_t *m = A->av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, NULL);
    if (!m) return 0;
    double ccw = A->av_display_rotation_get((const int32_t *)(const void *)m);
    if (isnan(ccw)) return 0;
    int cw = (int)lrint(-ccw);
    cw = ((cw % 360) + 360) % 360;
    return cw % 90 == 0 ? cw : 0;
}

vfm_status video_open(VideoReader **out, const char *path, VideoInfo *info) {
    *out = NULL;
    memset(info, 0, sizeof *info);
    const AvApi *A = av_api();
    if (!A) return vfm_fail_context(VFM_ERR_UNSUPPORTED, "%s", path);
    av_util_clear();
    VideoReader *r = calloc(1, sizeof *r);
    if (!r) return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", path);
    r->A = A;
    snprintf(r->path, sizeof r->path, "%s", path);
    r->converted = -1;
    int err = A->avformat_open_input(&r->fmt, path, NULL, NULL);
    vfm_status s = VFM_OK;
    if (err < 0) {
        char text[512];
        s = err == AVERROR(ENOENT) || err == AVERROR(EACCES) ? vfm_fail(VFM_ERR_IO, "%s: cannot open: %s", path, av_util_error(err, text, sizeof text))
                                                              : av_fail(r, err, "not a readable video");
        goto fail;
    }
    if ((err = A->avformat_find_stream_info(r->fmt, NULL)) < 0) {
        s = av_fail(r, err, "cannot read the stream information");
        goto fail;
    }
    const AVCodec *codec = NULL;
    int si = A->av_find_best_stream(r->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (si < 0) {
        s = si == AVERROR_DECODER_NOT_FOUND ? vfm_fail(VFM_ERR_FORMAT, "%s: no decoder for its video stream", path)
                                            : vfm_fail(VFM_ERR_FORMAT, "%s: holds no video stream", path);
        goto fail;
    }
    for (unsigned i = 0; i < r->fmt->nb_streams; i++)
        r->fmt->streams[i]->discard = (int)i == si ? AVDISCARD_DEFAULT : AVDISCARD_ALL;
    AVStream *st = r->fmt->streams[si];
    r->dec = A->avcodec_alloc_context3(codec);
    r->pkt = A->av_packet_alloc();
    r->cur = A->av_frame_alloc();
    r->next = A->av_frame_alloc();
    if (!r->dec || !r->pkt || !r->cur || !r->next) {
        s = vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    err = A->avcodec_parameters_to_context(r->dec, st->codecpar);
    r->dec->thread_count = 1; /* files are decoded in parallel, one thread each */
    if (err >= 0) err = A->avcodec_open2(r->dec, codec, NULL);
    if (err < 0) {
        s = av_fail(r, err, "cannot open the decoder");
        goto fail;
    }
    r->time_base = av_q2d(st->time_base);
    AVRational fr = st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0 ? st->avg_frame_rate : st->r_frame_rate;
    info->fps = fr.num > 0 && fr.den > 0 ? av_q2d(fr) : 0;
    r->frame_dur = info->fps > 0 ? 1.0 / info->fps : 0;
    info->duration = r->fmt->duration > 0 ? r->fmt->duration / (double)AV_TIME_BASE : 0;
    AVRational sar = A->av_guess_sample_aspect_ratio(r->fmt, st, NULL);
    info->pixel_aspect = sar.num > 0 && sar.den > 0 ? av_q2d(sar) : 1.0;
    r->rotation = info->rotation = stream_rotation(A, st);
    int w = st->codecpar->width, h = st->codecpar->height;
    if (w < 1 || h < 1) {
        s = vfm_fail(VFM_ERR_FORMAT, "%s: the video stream has no frame size", path);
        goto fail;
    }
    if (r->rotation == 90 || r->rotation == 270) {
        info->width = h, info->height = w;
        info->pixel_aspect = 1.0 / info->pixel_aspect;
    } else {
        info->width = w, info->height = h;
    }
    snprintf(info->codec, sizeof info->codec, "%s", codec->name);
    *out = r;
    return VFM_OK;
fail:
    video_close(r);
    return s;
}

/* Decodes the next frame into r->next (have_next); sets eof at the end. */
static vfm_status decode_next(VideoReader *r) {
    const AvApi *A = r->A;
    for (;;) {
        int err = A->avcodec_receive_frame(r->dec, r->next);
        if (err == 0) {
            int64_t ts = r->next->best_effort_timestamp;
            double t = ts != AV_NOPTS_VALUE ? ts * r->time_base
                       : r->have_cur       ? r->cur_t + (r->frame_dur > 0 ? r->frame_dur : 1.0 / 25)
                                           : 0;
            if (r->decoded == 0) r->t0 = t;
            r->next_t = t - r->t0;
            if (r->have_cur && r->next_t < r->cur_t) r->next_t = r->cur_t; /* never go back in time */
            r->have_next = 1;
            r->decoded++;
            return VFM_OK;
        }
        if (err == AVERROR_EOF) {
            r->eof = 1;
            return VFM_OK;
        }
        if (err != AVERROR(EAGAIN)) {
            char what[64];
            snprintf(what, sizeof what, "cannot decode frame %lld", (long long)r->decoded);
            return av_fail(r, err, what);
        }
        if (r->sent_flush) {
            r->eof = 1;
            return VFM_OK;
        }
        err = A->av_read_frame(r->fmt, r->pkt);
        if (err == AVERROR_EOF) {
            A->avcodec_send_packet(r->dec, NULL);
            r->sent_flush = 1;
            continue;
        }
        if (err < 0) return av_fail(r, err, "cannot read");
        if (r->fmt->streams[r->pkt->stream_index]->discard == AVDISCARD_ALL) {
            A->av_packet_unref(r->pkt);
            continue;
        }
        err = A->avcodec_send_packet(r->dec, r->pkt);
        A->av_packet_unref(r->pkt);
        if (err < 0 && err != AVERROR(EAGAIN)) {
            char what[64];
            snprintf(what, sizeof what, "cannot decode frame %lld", (long long)r->decoded);
            return av_fail(r, err, what);
        }
    }
}

/* cur := next. */
static void advance(VideoReader *r) {
    const AvApi *A = r->A;
    AVFrame *t = r->cur;
    r->cur = r->next;
    r->next = t;
    A->av_frame_unref(r->next);
    r->cur_t = r->next_t;
    r->cur_index = r->decoded - 1;
    r->have_cur = 1;
    r->have_next = 0;
}

static vfm_status convert(VideoReader *r) {
    const AvApi *A = r->A;
    if (r->converted == r->cur_index) return VFM_OK;
    AVFrame *f = r->cur;
    const AVPixFmtDescriptor *d = A->av_pix_fmt_desc_get(f->format);
    const int deep = d && d->comp[0].depth > 8;
    if (r->rgb.width != f->width || r->rgb.height != f->height || r->rgb.depth != (deep ? 16 : 8)) {
        pixel_image_free(&r->rgb);
        VFM_TRY(pixel_image_alloc(&r->rgb, f->width, f->height, deep ? 16 : 8));
    }
    r->sws = A->sws_getCachedContext(r->sws, f->width, f->height, f->format, f->width, f->height,
                                  deep ? AV_PIX_FMT_RGB48 : AV_PIX_FMT_RGB24,
                                  SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT | SWS_FULL_CHR_H_INP, NULL, NULL, NULL);
    if (!r->sws) return vfm_fail(VFM_ERR_FORMAT, "%s: cannot convert pixel format %s to RGB", r->path, d ? d->name : "?");
    int cs = f->colorspace == AVCOL_SPC_BT709 ? SWS_CS_ITU709
             : f->colorspace == AVCOL_SPC_BT2020_NCL || f->colorspace == AVCOL_SPC_BT2020_CL ? SWS_CS_BT2020
             : f->colorspace == AVCOL_SPC_SMPTE240M ? SWS_CS_SMPTE240M
             : f->colorspace == AVCOL_SPC_FCC ? SWS_CS_FCC
                                                : SWS_CS_ITU601;
    int full = f->color_range == AVCOL_RANGE_JPEG || f->format == AV_PIX_FMT_YUVJ420P || f->format == AV_PIX_FMT_YUVJ422P ||
               f->format == AV_PIX_FMT_YUVJ444P;
    A->sws_setColorspaceDetails(r->sws, A->sws_getCoefficients(cs), full, A->sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16,
                             1 << 16);
    uint8_t *dst[4] = {r->rgb.data, NULL, NULL, NULL};
    int dst_stride[4] = {(int)r->rgb.stride, 0, 0, 0};
    if (A->sws_scale(r->sws, (const uint8_t *const *)f->data, f->linesize, 0, f->height, dst, dst_stride) != f->height)
        return vfm_fail(VFM_ERR_FORMAT, "%s: frame %lld: conversion to RGB failed", r->path, (long long)r->cur_index);
    if (r->rotation) VFM_TRY(pixel_image_orient(&r->rgb, r->rotation == 90 ? 6 : r->rotation == 180 ? 3 : 8));
    r->converted = r->cur_index;
    return VFM_OK;
}

vfm_status video_next_frame(VideoReader *r, double fps, const PixelImage **frame, int *got) {
    *got = 0;
    *frame = NULL;
    if (!(fps > 0)) return vfm_fail(VFM_ERR_USAGE, "%s: frame rate %g: want > 0", r->path, fps);
    const double t = (double)r->k / fps;
    if (!r->have_cur) {
        VFM_TRY(decode_next(r));
        if (!r->have_next) {
            if (r->decoded == 0) return vfm_fail(VFM_ERR_FORMAT, "%s: no frame could be decoded", r->path);
            return VFM_OK;
        }
        advance(r);
    }
    for (;;) {
        if (!r->have_next && !r->eof) VFM_TRY(decode_next(r));
        if (!r->have_next || r->next_t > t + 1e-9) break;
        advance(r);
    }
    if (!r->have_next) { /* the last frame: shown for its duration */
        double dur = r->cur->pkt_duration > 0 ? r->cur->pkt_duration * r->time_base : r->frame_dur;
        if (t >= r->cur_t + (dur > 0 ? dur : 0) - 1e-9 && r->k > 0) return VFM_OK;
    }
    VFM_TRY(convert(r));
    r->k++;
    *frame = &r->rgb;
    *got = 1;
    return VFM_OK;
}
