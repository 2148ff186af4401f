/* Reading pictures: PNG through libpng and JPEG through libjpeg (Debian's libpng16 and
 * libjpeg62-turbo), from bytes in memory, into an interleaved RGB PixelImage.
 *   PNG: every colour type and bit depth; palette and grey expanded to RGB; 16-bit kept as 16-bit;
 *        interlaced (Adam7) read; alpha (or a tRNS colour) composited over black.
 *   JPEG: baseline and progressive, YCbCr or grey (CMYK / YCCK are refused); optionally decoded at
 *        1/2, 1/4 or 1/8 size by libjpeg's DCT scaling (a fast, good downscale for big photos).
 *   Both: the EXIF orientation (JPEG APP1 "Exif", PNG eXIf chunk) is applied, so the picture comes
 *        out the way viewers show it. Colour profiles and gamma are ignored (values as stored).
 * The format comes from the first bytes, not the file name. A damaged file (bad signature, CRC,
 * truncated data, a corrupt JPEG entropy segment) is VFM_ERR_FORMAT naming `what`; pictures above
 * IMAGE_MAX_PIXELS are refused. Any byte string is safe to hand in. */
#ifndef VFM_DATA_IMAGE_DECODE_H
#define VFM_DATA_IMAGE_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "data/media/resample.h"

#define IMAGE_MAX_PIXELS 100000000LL /* 100 megapixels */
#define IMAGE_MAX_SIDE 65535

typedef enum { IMAGE_UNKNOWN = 0, IMAGE_PNG, IMAGE_JPEG } ImageFormat;

typedef struct {
    ImageFormat format;
    int width, height; /* as displayed: after the EXIF orientation */
    int orientation;   /* EXIF orientation 1..8 (1: as stored) */
} ImageInfo;

/* The format from the first bytes (PNG signature, JPEG SOI marker), IMAGE_UNKNOWN otherwise. */
ImageFormat image_sniff(const uint8_t *data, size_t size);
const char *image_format_name(ImageFormat f); /* "PNG", "JPEG", "unknown" */

/* Reads the header only. */
vfm_status image_probe(const uint8_t *data, size_t size, const char *what, ImageInfo *info);

/* Decodes the whole picture. shrink (1, 2, 4 or 8): a JPEG is decoded at ceil(size / shrink);
 * a PNG ignores it. out is allocated (pixel_image_free). */
vfm_status image_decode(const uint8_t *data, size_t size, const char *what, int shrink, PixelImage *out);

/* The orientation tag (0x0112) of IFD0 of a TIFF-structured EXIF block (what follows "Exif\0\0"
 * in a JPEG, a PNG eXIf chunk's data); 1 when absent, out of range or unreadable. */
int exif_orientation(const uint8_t *tiff, size_t size);

/* Applies an EXIF orientation (1..8) to img in place (5..8 swap width and height). */
vfm_status pixel_image_orient(PixelImage *img, int orientation);

#endif
