/* MP4 writing with libavformat / libavcodec (see video_encode.h). */
#include "data/media/video_encode.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileutil.h"
#include "data/media/av_util.h"

const char *mp4_encoder_name(void) {
    const AvApi *A = av_api();
    if (!A) return NULL;
    if (A->avcodec_find_encoder_by_name("libx264")) return "libx264";
    if (A->avcodec_find_encoder(AV_CODEC_ID_MPEG4)) return "mpeg4";
    return NULL;
}

typedef struct {
    const AvApi *A;
    const char *path;
    AVFormatContext *oc;
    AVCodecContext *enc;
    AVStream *st;
    AVFrame *yuv;
    AVPacket *pkt;
    struct SwsContext *sws;
    uint8_t *padded; /* an even-sized RGB copy of an odd-sized frame */
} Mp4Writer;

static vfm_status fail_av(const Mp4Writer *w, int err, const char *what) {
    char text[512];
    return vfm_fail(VFM_ERR_IO, "%s: %s: %s", w->path, what, av_util_error(err, text, sizeof text));
}

/* Sends one frame (NULL: flush) and writes every packet that comes out. */
static vfm_status encode(Mp4Writer *w, AVFrame *frame) {
    const AvApi *A = w->A;
    int err = A->avcodec_send_frame(w->enc, frame);
    if (err < 0) return fail_av(w, err, "encoding failed");
    for (;;) {
        err = A->avcodec_receive_packet(w->enc, w->pkt);
        if (err == AVERROR(EAGAIN) || err == AVERROR_EOF) return VFM_OK;
        if (err < 0) return fail_av(w, err, "encoding failed");
        A->av_packet_rescale_ts(w->pkt, w->enc->time_base, w->st->time_base);
        w->pkt->stream_index = w->st->index;
        err = A->av_interleaved_write_frame(w->oc, w->pkt);
        if (err < 0) return fail_av(w, err, "cannot write");
    }
}

static vfm_status write_all(Mp4Writer *w, const char *tmp, const RgbImage *frames, int n, double fps, const char **codec_used) {
    const AvApi *A = w->A;
    const char *name = mp4_encoder_name();
    if (!name) return vfm_fail(VFM_ERR_UNSUPPORTED, "%s: this FFmpeg has neither libx264 nor an MPEG-4 encoder", w->path);
    const AVCodec *codec = strcmp(name, "libx264") == 0 ? A->avcodec_find_encoder_by_name(name) : A->avcodec_find_encoder(AV_CODEC_ID_MPEG4);
    const int W = frames[0].width, H = frames[0].height, W2 = (W + 1) & ~1, H2 = (H + 1) & ~1;
    int err = A->avformat_alloc_output_context2(&w->oc, NULL, "mp4", tmp);
    if (err < 0 || !w->oc) return fail_av(w, err, "cannot start an MP4");
    w->st = A->avformat_new_stream(w->oc, NULL);
    w->enc = A->avcodec_alloc_context3(codec);
    w->yuv = A->av_frame_alloc();
    w->pkt = A->av_packet_alloc();
    if (!w->st || !w->enc || !w->yuv || !w->pkt) return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", w->path);
    AVRational rate = A->av_d2q(fps, 1 << 16);
    w->enc->width = W2;
    w->enc->height = H2;
    w->enc->pix_fmt = AV_PIX_FMT_YUV420P;
    w->enc->time_base = av_inv_q(rate);
    w->enc->framerate = rate;
    w->enc->gop_size = 12;
    w->enc->thread_count = 1;
    w->enc->color_range = AVCOL_RANGE_MPEG;
    w->enc->colorspace = AVCOL_SPC_SMPTE170M;
    w->enc->color_primaries = AVCOL_PRI_SMPTE170M;
    w->enc->color_trc = AVCOL_TRC_SMPTE170M;
    if (w->oc->oformat->flags & AVFMT_GLOBALHEADER) w->enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    AVDictionary *opts = NULL;
    if (strcmp(name, "libx264") == 0) {
        A->av_dict_set(&opts, "crf", "18", 0);
        A->av_dict_set(&opts, "preset", "medium", 0);
    } else {
        w->enc->flags |= AV_CODEC_FLAG_QSCALE;
        w->enc->global_quality = FF_QP2LAMBDA * 2;
    }
    err = A->avcodec_open2(w->enc, codec, &opts);
    A->av_dict_free(&opts);
    if (err < 0) return fail_av(w, err, "cannot open the encoder");
    if ((err = A->avcodec_parameters_from_context(w->st->codecpar, w->enc)) < 0) return fail_av(w, err, "bad encoder parameters");
    w->st->time_base = w->enc->time_base;
    w->st->avg_frame_rate = rate;
    if ((err = A->avio_open(&w->oc->pb, tmp, AVIO_FLAG_WRITE)) < 0) return fail_av(w, err, "cannot create");
    if ((err = A->avformat_write_header(w->oc, NULL)) < 0) return fail_av(w, err, "cannot write the header");
    w->yuv->format = AV_PIX_FMT_YUV420P;
    w->yuv->width = W2;
    w->yuv->height = H2;
    if ((err = A->av_frame_get_buffer(w->yuv, 0)) < 0) return fail_av(w, err, "out of memory");
    w->sws = A->sws_getContext(W2, H2, AV_PIX_FMT_RGB24, W2, H2, AV_PIX_FMT_YUV420P,
                            SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INP, NULL, NULL, NULL);
    if (!w->sws) return vfm_fail(VFM_ERR_INTERNAL, "%s: no RGB -> YUV converter", w->path);
    A->sws_setColorspaceDetails(w->sws, A->sws_getCoefficients(SWS_CS_DEFAULT), 1, A->sws_getCoefficients(SWS_CS_ITU601), 0, 0,
                             1 << 16, 1 << 16);
    if (W2 != W || H2 != H) {
        w->padded = malloc((size_t)W2 * H2 * 3);
        if (!w->padded) return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", w->path);
    }
    for (int i = 0; i < n; i++) {
        const RgbImage *f = &frames[i];
        if (f->width != W || f->height != H)
            return vfm_fail(VFM_ERR_SHAPE, "%s: frame %d is %dx%d, frame 0 is %dx%d", w->path, i, f->width, f->height, W, H);
        const uint8_t *src = f->pixels;
        if (w->padded) {
            for (int y = 0; y < H2; y++) {
                const uint8_t *row = f->pixels + (size_t)(y < H ? y : H - 1) * W * 3;
                memcpy(w->padded + (size_t)y * W2 * 3, row, (size_t)W * 3);
                if (W2 != W) memcpy(w->padded + ((size_t)y * W2 + W) * 3, row + (size_t)(W - 1) * 3, 3);
            }
            src = w->padded;
        }
        if ((err = A->av_frame_make_writable(w->yuv)) < 0) return fail_av(w, err, "out of memory");
        const uint8_t *planes[4] = {src, NULL, NULL, NULL};
        const int strides[4] = {W2 * 3, 0, 0, 0};
        A->sws_scale(w->sws, planes, strides, 0, H2, w->yuv->data, w->yuv->linesize);
        w->yuv->pts = i;
        VFM_TRY(encode(w, w->yuv));
    }
    VFM_TRY(encode(w, NULL));
    if ((err = A->av_write_trailer(w->oc)) < 0) return fail_av(w, err, "cannot finish");
    if ((err = A->avio_closep(&w->oc->pb)) < 0) return fail_av(w, err, "cannot close");
    if (codec_used) *codec_used = name;
    return VFM_OK;
}

vfm_status mp4_write_rgb(const char *path, const RgbImage *frames, int n, double fps, const char **codec) {
    if (n < 1 || !(fps > 0) || fps > 1e6) return vfm_fail(VFM_ERR_USAGE, "%s: %d frames at %g fps: want >= 1 frame, fps > 0", path, n, fps);
    if (frames[0].width < 1 || frames[0].height < 1) return vfm_fail(VFM_ERR_SHAPE, "%s: empty frame", path);
    const AvApi *A = av_api();
    if (!A) return vfm_fail_context(VFM_ERR_UNSUPPORTED, "%s", path);
    av_util_clear();
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    Mp4Writer w = {.A = A, .path = path};
    vfm_status s = write_all(&w, tmp, frames, n, fps, codec);
    if (w.oc && w.oc->pb) A->avio_closep(&w.oc->pb);
    A->avformat_free_context(w.oc);
    A->avcodec_free_context(&w.enc);
    A->av_frame_free(&w.yuv);
    A->av_packet_free(&w.pkt);
    A->sws_freeContext(w.sws);
    free(w.padded);
    if (s == VFM_OK) s = fsync_path(tmp);
    if (s == VFM_OK && rename(tmp, path) != 0) s = vfm_fail(VFM_ERR_IO, "%s: cannot rename %s: %s", path, tmp, strerror(errno));
    if (s != VFM_OK) unlink(tmp);
    return s;
}
