/* PNG (libpng) and JPEG (libjpeg) decoding from memory, EXIF orientation (see image_decode.h).
 * Both libraries report errors by longjmp; all state they could leave allocated lives in a
 * context struct so the error path frees it. */
#include "data/media/image_decode.h"

#include <setjmp.h>
#include <stdio.h> /* before jpeglib.h, which uses FILE */
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

static const uint8_t k_png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

ImageFormat image_sniff(const uint8_t *data, size_t size) {
    if (size >= 8 && memcmp(data, k_png_signature, 8) == 0) return IMAGE_PNG;
    if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) return IMAGE_JPEG;
    return IMAGE_UNKNOWN;
}

const char *image_format_name(ImageFormat f) { return f == IMAGE_PNG ? "PNG" : f == IMAGE_JPEG ? "JPEG" : "unknown"; }

static vfm_status check_size(const char *what, int64_t w, int64_t h) {
    if (w < 1 || h < 1 || w > IMAGE_MAX_SIDE || h > IMAGE_MAX_SIDE || w * h > IMAGE_MAX_PIXELS)
        return vfm_fail(VFM_ERR_FORMAT, "%s: picture of %lldx%lld pixels: want sides 1..%d and at most %lld pixels", what,
                        (long long)w, (long long)h, IMAGE_MAX_SIDE, IMAGE_MAX_PIXELS);
    return VFM_OK;
}

/* ---- EXIF ---- */

static uint32_t rd16(const uint8_t *p, int big) { return big ? (uint32_t)p[0] << 8 | p[1] : (uint32_t)p[1] << 8 | p[0]; }
static uint32_t rd32(const uint8_t *p, int big) {
    return big ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
               : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

int exif_orientation(const uint8_t *tiff, size_t size) {
    if (!tiff || size < 8) return 1;
    int big;
    if (tiff[0] == 'I' && tiff[1] == 'I') big = 0;
    else if (tiff[0] == 'M' && tiff[1] == 'M') big = 1;
    else return 1;
    if (rd16(tiff + 2, big) != 42) return 1;
    uint32_t ifd = rd32(tiff + 4, big);
    if (ifd > size - 2 || ifd < 8) return 1;
    uint32_t n = rd16(tiff + ifd, big);
    for (uint32_t i = 0; i < n; i++) {
        size_t e = (size_t)ifd + 2 + (size_t)i * 12;
        if (e + 12 > size) return 1;
        if (rd16(tiff + e, big) != 0x0112) continue;
        uint32_t type = rd16(tiff + e + 2, big), count = rd32(tiff + e + 4, big);
        if (type != 3 || count != 1) return 1; /* SHORT, one value, stored in the entry */
        uint32_t v = rd16(tiff + e + 8, big);
        return v >= 1 && v <= 8 ? (int)v : 1;
    }
    return 1;
}

vfm_status pixel_image_orient(PixelImage *img, int orientation) {
    if (orientation <= 1 || orientation > 8) return VFM_OK;
    const int W = img->width, H = img->height, swap = orientation >= 5;
    PixelImage out;
    VFM_TRY(pixel_image_alloc(&out, swap ? H : W, swap ? W : H, img->depth));
    const size_t px = (size_t)3 * (img->depth / 8);
    for (int oy = 0; oy < out.height; oy++)
        for (int ox = 0; ox < out.width; ox++) {
            int sx, sy;
            switch (orientation) {
            case 2: sx = W - 1 - ox, sy = oy; break;          /* mirrored left-right */
            case 3: sx = W - 1 - ox, sy = H - 1 - oy; break;  /* turned 180 degrees */
            case 4: sx = ox, sy = H - 1 - oy; break;          /* mirrored top-bottom */
            case 5: sx = oy, sy = ox; break;                  /* transposed */
            case 6: sx = oy, sy = H - 1 - ox; break;          /* shown turned 90 degrees clockwise */
            case 7: sx = W - 1 - oy, sy = H - 1 - ox; break;  /* transversed */
            default: sx = W - 1 - oy, sy = ox; break;         /* 8: shown turned 90 degrees anticlockwise */
            }
            memcpy(out.data + (size_t)oy * out.stride + (size_t)ox * px, img->data + (size_t)sy * img->stride + (size_t)sx * px, px);
        }
    pixel_image_free(img);
    *img = out;
    return VFM_OK;
}

/* ---- PNG ---- */

/* The eXIf chunk's orientation: walks the chunk list (before or after the image data). */
static int png_orientation(const uint8_t *data, size_t size) {
    size_t at = 8;
    while (at + 12 <= size) {
        uint32_t len = rd32(data + at, 1);
        if (len > size - at - 12) return 1;
        if (memcmp(data + at + 4, "eXIf", 4) == 0) return exif_orientation(data + at + 8, len);
        if (memcmp(data + at + 4, "IEND", 4) == 0) return 1;
        at += (size_t)len + 12;
    }
    return 1;
}

typedef struct {
    jmp_buf jmp;
    char msg[256];
    const uint8_t *data;
    size_t size, at;
    png_structp png;
    png_infop info;
    uint8_t *pixels;
    png_bytep *rows;
} PngCtx;

static void png_on_error(png_structp png, png_const_charp msg) {
    PngCtx *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    longjmp(c->jmp, 1);
}
static void png_on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static void png_read_mem(png_structp png, png_bytep out, size_t n) {
    PngCtx *c = png_get_io_ptr(png);
    if (n > c->size - c->at) png_error(png, "the file ends early (truncated)");
    memcpy(out, c->data + c->at, n);
    c->at += n;
}

static vfm_status png_probe(const uint8_t *data, size_t size, const char *what, ImageInfo *info) {
    /* signature, then the IHDR chunk: length 13, "IHDR", width, height */
    if (size < 33 || memcmp(data + 12, "IHDR", 4) != 0) return vfm_fail(VFM_ERR_FORMAT, "%s: PNG without an IHDR chunk", what);
    info->width = (int)(rd32(data + 16, 1) & 0x7fffffff);
    info->height = (int)(rd32(data + 20, 1) & 0x7fffffff);
    VFM_TRY(check_size(what, rd32(data + 16, 1), rd32(data + 20, 1)));
    info->orientation = png_orientation(data, size);
    return VFM_OK;
}

/* Runs the libpng calls; returns 0, or 1 after a libpng error (message in c->msg). */
static int png_run(PngCtx *c, PixelImage *out) {
    if (setjmp(c->jmp)) return 1;
    png_set_read_fn(c->png, c, png_read_mem);
    png_set_user_limits(c->png, IMAGE_MAX_SIDE, IMAGE_MAX_SIDE);
    png_read_info(c->png, c->info);
    png_uint_32 w, h;
    int bit_depth, color_type, interlace;
    png_get_IHDR(c->png, c->info, &w, &h, &bit_depth, &color_type, &interlace, NULL, NULL);
    if ((int64_t)w * h > IMAGE_MAX_PIXELS) png_error(c->png, "too many pixels");
    png_set_expand(c->png); /* palette -> RGB, grey < 8 bits -> 8 bits, tRNS -> alpha */
    if (color_type == PNG_COLOR_TYPE_GRAY || color_type == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(c->png);
    if (bit_depth == 16) {
        const uint16_t one = 1;
        if (*(const uint8_t *)&one == 1) png_set_swap(c->png); /* PNG is big-endian; we want native */
    }
    png_set_interlace_handling(c->png);
    png_read_update_info(c->png, c->info);
    const int channels = png_get_channels(c->png, c->info), depth = png_get_bit_depth(c->png, c->info);
    const size_t rowbytes = png_get_rowbytes(c->png, c->info);
    if ((channels != 3 && channels != 4) || (depth != 8 && depth != 16) || rowbytes != (size_t)w * channels * (depth / 8))
        png_error(c->png, "unexpected layout after expansion");
    c->pixels = malloc(rowbytes * h);
    c->rows = malloc(sizeof *c->rows * h);
    if (!c->pixels || !c->rows) png_error(c->png, "out of memory");
    for (png_uint_32 y = 0; y < h; y++) c->rows[y] = c->pixels + (size_t)y * rowbytes;
    png_read_image(c->png, c->rows);
    png_read_end(c->png, NULL);
    if (pixel_image_alloc(out, (int)w, (int)h, depth) != VFM_OK) png_error(c->png, "out of memory");
    /* RGB(A) -> RGB, alpha composited over black */
    for (png_uint_32 y = 0; y < h; y++) {
        uint8_t *dst = out->data + (size_t)y * out->stride;
        const uint8_t *src = c->rows[y];
        if (channels == 3) {
            memcpy(dst, src, out->stride);
        } else if (depth == 8) {
            for (png_uint_32 x = 0; x < w; x++)
                for (int k = 0; k < 3; k++)
                    dst[3 * x + k] = (uint8_t)((src[4 * x + k] * src[4 * x + 3] + 127) / 255);
        } else {
            const uint16_t *s16 = (const uint16_t *)(const void *)src;
            uint16_t *d16 = (uint16_t *)(void *)dst;
            for (png_uint_32 x = 0; x < w; x++)
                for (int k = 0; k < 3; k++)
                    d16[3 * x + k] = (uint16_t)(((uint32_t)s16[4 * x + k] * s16[4 * x + 3] + 32767) / 65535);
        }
    }
    return 0;
}

static vfm_status png_decode(const uint8_t *data, size_t size, const char *what, PixelImage *out) {
    PngCtx *c = calloc(1, sizeof *c);
    if (!c) return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", what);
    c->data = data;
    c->size = size;
    c->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, c, png_on_error, png_on_warning);
    c->info = c->png ? png_create_info_struct(c->png) : NULL;
    vfm_status s = VFM_OK;
    memset(out, 0, sizeof *out);
    if (!c->png || !c->info) s = vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", what);
    else if (png_run(c, out) != 0) {
        pixel_image_free(out);
        s = vfm_fail(VFM_ERR_FORMAT, "%s: not a readable PNG: %s", what, c->msg);
    }
    png_destroy_read_struct(&c->png, c->info ? &c->info : NULL, NULL);
    free(c->pixels);
    free(c->rows);
    free(c);
    if (s == VFM_OK) s = pixel_image_orient(out, png_orientation(data, size));
    return s;
}

/* ---- JPEG ---- */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jmp;
    char msg[JMSG_LENGTH_MAX + 64];
    struct jpeg_decompress_struct cinfo;
    int created;
    uint8_t *pixels;
} JpegCtx;

static void jpeg_on_error(j_common_ptr cinfo) {
    JpegCtx *c = (JpegCtx *)(void *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, c->msg);
    longjmp(c->jmp, 1);
}

/* Warnings that mean the pixels are not what was encoded are errors here. */
static void jpeg_on_message(j_common_ptr cinfo, int level) {
    if (level >= 0) return; /* trace messages */
    int code = cinfo->err->msg_code;
    if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || code == JWRN_HUFF_BAD_CODE) jpeg_on_error(cinfo);
}

static int jpeg_orientation(struct jpeg_decompress_struct *cinfo) {
    for (jpeg_saved_marker_ptr m = cinfo->marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && m->data_length > 6 && memcmp(m->data, "Exif\0\0", 6) == 0)
            return exif_orientation(m->data + 6, m->data_length - 6);
    return 1;
}

/* The libjpeg calls; returns 0, or 1 after a libjpeg error (message in c->msg). header_only: stops
 * after the header (info filled). */
static int jpeg_run(JpegCtx *c, const uint8_t *data, size_t size, int shrink, int header_only, ImageInfo *info,
                    PixelImage *out) {
    if (setjmp(c->jmp)) return 1;
    c->cinfo.err = jpeg_std_error(&c->pub);
    c->pub.error_exit = jpeg_on_error;
    c->pub.emit_message = jpeg_on_message;
    jpeg_create_decompress(&c->cinfo);
    c->created = 1;
    jpeg_mem_src(&c->cinfo, data, (unsigned long)size);
    jpeg_save_markers(&c->cinfo, JPEG_APP0 + 1, 0xffff);
    jpeg_read_header(&c->cinfo, TRUE);
    if (c->cinfo.jpeg_color_space == JCS_CMYK || c->cinfo.jpeg_color_space == JCS_YCCK) {
        snprintf(c->msg, sizeof c->msg, "CMYK JPEGs are not supported (convert it to RGB)");
        return 1;
    }
    info->orientation = jpeg_orientation(&c->cinfo);
    info->width = (int)c->cinfo.image_width;
    info->height = (int)c->cinfo.image_height;
    if ((int64_t)info->width * info->height > IMAGE_MAX_PIXELS) {
        snprintf(c->msg, sizeof c->msg, "%dx%d pixels: at most %lld", info->width, info->height, IMAGE_MAX_PIXELS);
        return 1;
    }
    if (header_only) return 0;
    c->cinfo.out_color_space = JCS_RGB;
    c->cinfo.scale_num = 1;
    c->cinfo.scale_denom = (unsigned)shrink;
    c->cinfo.dct_method = JDCT_ISLOW;
    jpeg_start_decompress(&c->cinfo);
    const int w = (int)c->cinfo.output_width, h = (int)c->cinfo.output_height;
    if (c->cinfo.output_components != 3 || pixel_image_alloc(out, w, h, 8) != VFM_OK) {
        snprintf(c->msg, sizeof c->msg, "cannot decode to RGB (%d components)", c->cinfo.output_components);
        return 1;
    }
    while (c->cinfo.output_scanline < c->cinfo.output_height) {
        JSAMPROW row = out->data + (size_t)c->cinfo.output_scanline * out->stride;
        jpeg_read_scanlines(&c->cinfo, &row, 1);
    }
    jpeg_finish_decompress(&c->cinfo);
    return 0;
}

static vfm_status jpeg_do(const uint8_t *data, size_t size, const char *what, int shrink, int header_only, ImageInfo *info,
                          PixelImage *out) {
    JpegCtx *c = calloc(1, sizeof *c);
    if (!c) return vfm_fail(VFM_ERR_NOMEM, "%s: out of memory", what);
    memset(out, 0, sizeof *out);
    vfm_status s = VFM_OK;
    if (jpeg_run(c, data, size, shrink, header_only, info, out) != 0) {
        pixel_image_free(out);
        s = vfm_fail(VFM_ERR_FORMAT, "%s: not a readable JPEG: %s", what, c->msg);
    }
    if (c->created) jpeg_destroy_decompress(&c->cinfo);
    free(c);
    if (s == VFM_OK && !header_only) s = pixel_image_orient(out, info->orientation);
    return s;
}

/* ---- entry points ---- */

vfm_status image_probe(const uint8_t *data, size_t size, const char *what, ImageInfo *info) {
    memset(info, 0, sizeof *info);
    info->format = image_sniff(data, size);
    if (info->format == IMAGE_PNG) VFM_TRY(png_probe(data, size, what, info));
    else if (info->format == IMAGE_JPEG) {
        PixelImage none;
        VFM_TRY(jpeg_do(data, size, what, 1, 1, info, &none));
        VFM_TRY(check_size(what, info->width, info->height));
    } else
        return vfm_fail(VFM_ERR_FORMAT, "%s: neither a PNG nor a JPEG (the first bytes are not a picture signature)", what);
    if (info->orientation >= 5) {
        int t = info->width;
        info->width = info->height;
        info->height = t;
    }
    return VFM_OK;
}

vfm_status image_decode(const uint8_t *data, size_t size, const char *what, int shrink, PixelImage *out) {
    memset(out, 0, sizeof *out);
    if (shrink != 1 && shrink != 2 && shrink != 4 && shrink != 8)
        return vfm_fail(VFM_ERR_USAGE, "%s: shrink %d (want 1, 2, 4 or 8)", what, shrink);
    ImageFormat f = image_sniff(data, size);
    if (f == IMAGE_PNG) return png_decode(data, size, what, out);
    if (f == IMAGE_JPEG) {
        ImageInfo info;
        return jpeg_do(data, size, what, shrink, 0, &info, out);
    }
    return vfm_fail(VFM_ERR_FORMAT, "%s: neither a PNG nor a JPEG (the first bytes are not a picture signature)", what);
}
