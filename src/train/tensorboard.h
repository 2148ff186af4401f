/* TensorBoard event files written by hand: TFRecord framing (u64 length, masked CRC32C of the
 * length, the bytes, masked CRC32C of the bytes; mask = rotr(crc, 15) + 0xa282ead8) around
 * tensorflow.Event protobufs (wall_time = 1, step = 2, file_version = 3, summary = 5) holding
 * Summary.Value{tag = 1, simple_value = 2 | image = 4 {height 1, width 2, colorspace 3,
 * encoded_image_string 4}}, serialised as proto3 does (fields in number order, defaults omitted).
 * The file `events.out.tfevents.<seconds>.<host>.<pid>` starts with the file_version event
 * "brain.Event:2". TensorBoard and tf.data read these files. */
#ifndef VFM_TENSORBOARD_H
#define VFM_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"

typedef struct TbWriter {
    FILE *f;
    char path[1200];
} TbWriter;

/* Creates dir (and parents) and a new event file in it; wall_time stamps the first event
 * (tb_wall_time() for now). */
vfm_status tb_open(TbWriter *w, const char *dir, double wall_time);
/* Writes an event file at exactly `path` (tests, fixtures). */
vfm_status tb_open_path(TbWriter *w, const char *path, double wall_time);
vfm_status tb_add_scalar(TbWriter *w, int64_t step, double wall_time, const char *tag, float value);
/* png: the encoded picture (height x width RGB). */
vfm_status tb_add_image(TbWriter *w, int64_t step, double wall_time, const char *tag, const uint8_t *png, size_t len,
                        int height, int width);
vfm_status tb_flush(TbWriter *w);
void tb_close(TbWriter *w);
/* Seconds since the Unix epoch (what TensorBoard plots as wall time). */
double tb_wall_time(void);

/* CRC32C (Castagnoli, reflected 0x82F63B78); start with crc = 0. And the TFRecord mask. */
uint32_t crc32c(uint32_t crc, const void *data, size_t n);
uint32_t tfrecord_masked_crc(const void *data, size_t n);

/* One TFRecord of a file at *pos (advanced past it): its data (pointing into buf) and length.
 * VFM_ERR_FORMAT when the framing or either CRC is wrong. */
vfm_status tfrecord_next(const uint8_t *buf, size_t size, size_t *pos, const uint8_t **data, size_t *len);

#endif
