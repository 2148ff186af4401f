/* File-system helpers: crash-safe writes (temporary name, fsync, rename, fsync of the directory),
 * whole-file reads, directories. */
#ifndef VFM_FILEUTIL_H
#define VFM_FILEUTIL_H

#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "error.h"

/* A file written under "<path>.tmp.<pid>" and renamed over <path> on commit, so readers see the
 * old file or the complete new one, never a part. */
typedef struct AtomicFile {
    char path[1024], tmp[1100];
    int fd;
} AtomicFile;

vfm_status atomic_file_open(AtomicFile *f, const char *path);
vfm_status atomic_file_write(AtomicFile *f, const void *data, size_t n);
/* fsync, close, rename, fsync the directory. */
vfm_status atomic_file_commit(AtomicFile *f);
void atomic_file_abort(AtomicFile *f);
/* Whole-buffer convenience. */
vfm_status write_file_atomic(const char *path, const void *data, size_t n);

vfm_status read_file_all(const char *path, char **data, size_t *size); /* NUL-terminated extra byte */
vfm_status pread_full(int fd, void *buf, size_t n, off_t offset);
vfm_status mkdir_p(const char *path);
vfm_status fsync_dir(const char *dir);
vfm_status fsync_path(const char *path);
/* Removes a file or a directory tree (no error when absent). */
vfm_status remove_tree(const char *path);
int path_exists(const char *path);
int dir_exists(const char *path);
/* Calls fn for every regular file below root (symbolic links followed, at most 32 directories
 * deep), skipping names that start with a dot; rel is the path relative to root, st its stat.
 * A non-OK return from fn stops the walk with that status. Order: as readdir gives it. */
typedef vfm_status (*FileWalkFn)(void *ctx, const char *rel, const char *name, const struct stat *st);
vfm_status walk_files(const char *root, FileWalkFn fn, void *ctx);
/* out = a + "/" + b */
void path_join(char *out, size_t n, const char *a, const char *b);
/* The directory part of path ("." when none). */
void path_dirname(char *out, size_t n, const char *path);

#endif
