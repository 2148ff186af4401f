/* Crash-safe file writes and small file-system helpers. */
#include "fileutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void path_join(char *out, size_t n, const char *a, const char *b) {
    size_t la = strlen(a);
    snprintf(out, n, "%s%s%s", a, (la && a[la - 1] == '/') ? "" : "/", b);
}

void path_dirname(char *out, size_t n, const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(out, n, ".");
        return;
    }
    size_t len = (size_t)(slash - path);
    if (len == 0) len = 1;
    if (len >= n) len = n - 1;
    memcpy(out, path, len);
    out[len] = 0;
}

int path_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

vfm_status fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return vfm_fail(VFM_ERR_IO, "%s: cannot open to sync: %s", path, strerror(errno));
    int rc = fsync(fd);
    close(fd);
    return rc == 0 ? VFM_OK : vfm_fail(VFM_ERR_IO, "%s: fsync failed: %s", path, strerror(errno));
}

vfm_status fsync_dir(const char *dir) { return fsync_path(dir); }

vfm_status atomic_file_open(AtomicFile *f, const char *path) {
    snprintf(f->path, sizeof f->path, "%s", path);
    snprintf(f->tmp, sizeof f->tmp, "%s.tmp.%d", path, (int)getpid());
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (f->fd < 0) return vfm_fail(VFM_ERR_IO, "%s: cannot create: %s", f->tmp, strerror(errno));
    return VFM_OK;
}

vfm_status atomic_file_write(AtomicFile *f, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(f->fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return vfm_fail(VFM_ERR_IO, "%s: write failed: %s", f->tmp, strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
    return VFM_OK;
}

vfm_status atomic_file_commit(AtomicFile *f) {
    if (fsync(f->fd) != 0 || close(f->fd) != 0) {
        f->fd = -1;
        unlink(f->tmp);
        return vfm_fail(VFM_ERR_IO, "%s: cannot flush: %s", f->tmp, strerror(errno));
    }
    f->fd = -1;
    if (rename(f->tmp, f->path) != 0) {
        unlink(f->tmp);
        return vfm_fail(VFM_ERR_IO, "%s: cannot rename into place: %s", f->path, strerror(errno));
    }
    char dir[1024];
    path_dirname(dir, sizeof dir, f->path);
    return fsync_dir(dir);
}

void atomic_file_abort(AtomicFile *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    unlink(f->tmp);
}

vfm_status write_file_atomic(const char *path, const void *data, size_t n) {
    AtomicFile f;
    VFM_TRY(atomic_file_open(&f, path));
    vfm_status s = atomic_file_write(&f, data, n);
    if (s != VFM_OK) {
        atomic_file_abort(&f);
        return s;
    }
    return atomic_file_commit(&f);
}

vfm_status read_file_all(const char *path, char **data, size_t *size) {
    *data = NULL;
    if (size) *size = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return vfm_fail(VFM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return vfm_fail(VFM_ERR_IO, "%s: cannot stat", path);
    }
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        close(fd);
        return vfm_fail(VFM_ERR_NOMEM, "%s: %lld bytes", path, (long long)st.st_size);
    }
    vfm_status s = pread_full(fd, buf, (size_t)st.st_size, 0);
    close(fd);
    if (s != VFM_OK) {
        free(buf);
        return vfm_fail(VFM_ERR_IO, "%s: cannot read", path);
    }
    buf[st.st_size] = 0;
    *data = buf;
    if (size) *size = (size_t)st.st_size;
    return VFM_OK;
}

vfm_status pread_full(int fd, void *buf, size_t n, off_t offset) {
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, offset);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return vfm_fail(VFM_ERR_IO, "short read at offset %lld", (long long)offset);
        p += r;
        n -= (size_t)r;
        offset += r;
    }
    return VFM_OK;
}

vfm_status mkdir_p(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return vfm_fail(VFM_ERR_IO, "%s: cannot create: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return vfm_fail(VFM_ERR_IO, "%s: cannot create: %s", buf, strerror(errno));
    if (!dir_exists(buf)) return vfm_fail(VFM_ERR_IO, "%s: exists and is not a directory", buf);
    return VFM_OK;
}

vfm_status remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return VFM_OK;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) return vfm_fail(VFM_ERR_IO, "%s: cannot open directory", path);
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char child[2048];
            path_join(child, sizeof child, path, e->d_name);
            vfm_status s = remove_tree(child);
            if (s != VFM_OK) {
                closedir(d);
                return s;
            }
        }
        closedir(d);
        if (rmdir(path) != 0) return vfm_fail(VFM_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
        return VFM_OK;
    }
    if (unlink(path) != 0) return vfm_fail(VFM_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    return VFM_OK;
}

static vfm_status walk_dir(const char *root, const char *rel, int depth, FileWalkFn fn, void *ctx) {
    char dir[2200];
    if (rel[0]) snprintf(dir, sizeof dir, "%s/%s", root, rel);
    else snprintf(dir, sizeof dir, "%s", root);
    if (depth > 32) return vfm_fail(VFM_ERR_USAGE, "%s: directories nested more than 32 deep (a link loop?)", dir);
    DIR *d = opendir(dir);
    if (!d) return vfm_fail(VFM_ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
    vfm_status s = VFM_OK;
    struct dirent *e;
    while (s == VFM_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char child[1100], path[3400];
        if (rel[0]) snprintf(child, sizeof child, "%s/%s", rel, e->d_name);
        else snprintf(child, sizeof child, "%s", e->d_name);
        snprintf(path, sizeof path, "%s/%s", root, child);
        struct stat st;
        if (stat(path, &st) != 0) continue; /* a dangling link */
        if (S_ISDIR(st.st_mode)) s = walk_dir(root, child, depth + 1, fn, ctx);
        else if (S_ISREG(st.st_mode)) s = fn(ctx, child, e->d_name, &st);
    }
    closedir(d);
    return s;
}

vfm_status walk_files(const char *root, FileWalkFn fn, void *ctx) { return walk_dir(root, "", 0, fn, ctx); }
