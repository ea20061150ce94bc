/* fileio.c: mappings, reads and atomic writes (see fileio.h). */
#include "fileio.h"
#include "alloc.h"
#include "error.h"
#include <errno.h>
#include <stdint.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int file_map(MappedFile *m, const char *path) {
    memset(m, 0, sizeof *m);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return error_set("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        close(fd);
        return error_set("%s: cannot stat: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return error_set("%s: not a regular file", path);
    }
    m->size = (size_t)st.st_size;
    if (m->size > 0) {
        void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return error_set("%s: cannot map: %s", path, strerror(errno));
        }
        m->data = p;
    }
    close(fd);
    m->path = mem_strdup(path);
    if (!m->path) {
        file_unmap(m);
        return -1;
    }
    return 0;
}

void file_unmap(MappedFile *m) {
    if (m->data) munmap((void *)m->data, m->size);
    mem_free(m->path);
    memset(m, 0, sizeof *m);
}

size_t file_page_size(void) {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

static int by_begin(const void *a, const void *b) {
    const ByteRange *x = a, *y = b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

/* Sorts the ranges and turns them into merged page runs [begin, end) in
 * page units, clipped to the file; returns the number of runs (in place). */
static size_t page_runs(ByteRange *r, size_t n, size_t size) {
    size_t pg = file_page_size(), pages = (size + pg - 1) / pg, k = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].end <= r[i].begin || r[i].begin >= size) continue;
        size_t e = r[i].end < size ? r[i].end : size;
        r[k].begin = r[i].begin / pg;
        r[k].end = (e + pg - 1) / pg;
        if (r[k].end > pages) r[k].end = pages;
        k++;
    }
    if (k > 1) qsort(r, k, sizeof *r, by_begin);   /* r may be NULL when there is nothing to keep */
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        if (m > 0 && r[i].begin <= r[m - 1].end) {
            if (r[i].end > r[m - 1].end) r[m - 1].end = r[i].end;
        } else {
            r[m++] = r[i];
        }
    }
    return m;
}

size_t file_pages_covering(ByteRange *ranges, size_t n, size_t size) {
    size_t runs = page_runs(ranges, n, size), pages = 0;
    for (size_t i = 0; i < runs; i++) pages += ranges[i].end - ranges[i].begin;
    return pages;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

/* Drops the pages [a, b) of the mapping (page units). */
static int drop_pages(const MappedFile *m, size_t a, size_t b) {
    size_t pg = file_page_size();
    if (b <= a) return 0;
    if (madvise((unsigned char *)m->data + a * pg, (b - a) * pg, MADV_DONTNEED) < 0)
        return error_set("%s: cannot drop unused pages: %s", m->path, strerror(errno));
    return 0;
}

/* No huge mappings in the 2 MiB-aligned windows (of the address space)
 * that the gap of pages [a, b) touches. */
static int no_huge_around(const MappedFile *m, size_t a, size_t b) {
    if (b <= a) return 0;
    size_t pg = file_page_size(), huge = (size_t)2 << 20;
    uintptr_t base = (uintptr_t)m->data, end = base + (m->size + pg - 1) / pg * pg;
    uintptr_t lo = (base + a * pg) / huge * huge, hi = (base + b * pg + huge - 1) / huge * huge;
    if (lo < base) lo = base;
    if (hi > end) hi = end;
    if (hi > lo && madvise((void *)lo, hi - lo, MADV_NOHUGEPAGE) < 0 && errno != EINVAL)
        return error_set("%s: cannot map without huge pages: %s", m->path, strerror(errno));
    return 0;
}

int file_map_keep(const MappedFile *m, ByteRange *ranges, size_t n) {
    if (!m->data || !m->size) return 0;
    size_t pg = file_page_size(), pages = (m->size + pg - 1) / pg;
    size_t runs = page_runs(ranges, n, m->size);
    unsigned char *base = (unsigned char *)m->data;
    /* A fault maps its whole folio, up to 2 MiB around the page: after each
     * run is faulted in, the gaps within that reach behind it are dropped
     * (again), so what was mapped beyond the kept pages never adds up to
     * more than a folio or two; the last gap goes at the end. */
    const size_t reach = ((size_t)2 << 20) / pg;
    /* A 2 MiB folio may be mapped by one PMD entry; dropping a gap inside
     * it unmaps the whole entry, the kept pages with it, and a later read of
     * one of them maps the 2 MiB again: page table entries only, in the
     * 2 MiB windows that a gap touches. The windows wholly inside kept runs
     * stay eligible for huge mappings, whose pages are all kept anyway: with
     * 4 KiB entries everywhere, reading the weights (decoding is bound by
     * it) ran at a quarter of the speed on these VMs (TLB misses). */
    TRY(no_huge_around(m, 0, runs ? ranges[0].begin : pages));
    for (size_t i = 0; i + 1 < runs; i++) TRY(no_huge_around(m, ranges[i].end, ranges[i + 1].begin));
    if (runs) TRY(no_huge_around(m, ranges[runs - 1].end, pages));
    TRY(drop_pages(m, 0, runs ? ranges[0].begin : pages));
    for (size_t i = 0; i < runs; i++) {
        unsigned char *p = base + ranges[i].begin * pg;
        size_t len = (ranges[i].end - ranges[i].begin) * pg;
        if (madvise(p, len, MADV_POPULATE_READ) != 0) {
            volatile unsigned char sink = 0;
            for (size_t off = 0; off < len; off += pg) sink ^= p[off];
            (void)sink;
        }
        size_t from = ranges[i].begin > reach ? ranges[i].begin - reach : 0;
        for (size_t j = i; j > 0; j--) {
            if (ranges[j].begin <= from) break;
            TRY(drop_pages(m, ranges[j - 1].end, ranges[j].begin));
        }
        if (from == 0 || i == 0) TRY(drop_pages(m, 0, ranges[0].begin));
    }
    return drop_pages(m, runs ? ranges[runs - 1].end : pages, pages);
}

int file_map_drop(const MappedFile *m, const void *p, size_t n) {
    const unsigned char *b = p;
    if (!m->data || b < m->data || b + n > m->data + m->size) return 0;
    size_t pg = file_page_size(), off = (size_t)(b - m->data);
    return drop_pages(m, (off + pg - 1) / pg, (off + n) / pg);
}

int file_read_at(const char *path, size_t offset, void *dst, size_t n) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return error_set("%s: cannot open: %s", path, strerror(errno));
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)dst + got, n - got, (off_t)(offset + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            close(fd);
            return error_set("%s: cannot read %zu bytes at offset %zu: %s", path, n, offset,
                             e ? strerror(e) : "unexpected end of file");
        }
        got += (size_t)r;
    }
    close(fd);
    return 0;
}

int file_read_all(const char *path, size_t max_bytes, char **out, size_t *out_size) {
    *out = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) return error_set("%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = mem_alloc(cap);
    if (!buf) {
        fclose(fp);
        return -1;
    }
    for (;;) {
        if (n + 1 >= cap) {
            if (max_bytes && cap > max_bytes + 1) break;
            char *nb = mem_realloc(buf, cap * 2);
            if (!nb) {
                mem_free(buf);
                fclose(fp);
                return -1;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, fp);
        n += got;
        if (got == 0) break;
        if (max_bytes && n > max_bytes) break;
    }
    int err = ferror(fp);
    fclose(fp);
    if (err) {
        mem_free(buf);
        return error_set("%s: read error", path);
    }
    if (max_bytes && n > max_bytes) {
        mem_free(buf);
        return error_set("%s: file larger than the limit of %zu bytes", path, max_bytes);
    }
    buf[n] = 0;
    *out = buf;
    if (out_size) *out_size = n;
    return 0;
}

bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}
bool dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int dir_ensure(const char *path) {
    char buf[4096];
    if (strlen(path) >= sizeof buf) return error_set("%s: path too long", path);
    strcpy(buf, path);
    for (char *p = buf + 1; ; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0755) < 0 && errno != EEXIST)
                return error_set("%s: cannot create directory: %s", buf, strerror(errno));
            if (!dir_exists(buf)) return error_set("%s: exists and is not a directory", buf);
            *p = c;
            if (c == 0) break;
        }
    }
    return 0;
}

char *path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = mem_alloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

static long fail_write_at = -1, write_count = 0;
void fileio_fail_write_at(long n) {
    fail_write_at = n > 0 ? n : 0;
    write_count = 0;
}
static bool inject_write_failure(void) {
    if (fail_write_at < 0) {
        const char *e = getenv("LMTUNE_FAIL_WRITE");
        fail_write_at = e ? atol(e) : 0;
    }
    write_count++;
    return fail_write_at > 0 && write_count == fail_write_at;
}

int atomic_open(AtomicFile *f, const char *path) {
    memset(f, 0, sizeof *f);
    size_t n = strlen(path);
    f->final_path = mem_strdup(path);
    f->tmp_path = mem_alloc(n + 32);
    if (!f->final_path || !f->tmp_path) {
        atomic_abort(f);
        return -1;
    }
    snprintf(f->tmp_path, n + 32, "%s.tmp.%ld", path, (long)getpid());
    f->fp = fopen(f->tmp_path, "wb");
    if (!f->fp) {
        int e = errno;
        error_set("%s: cannot write: %s", path, strerror(e));
        mem_free(f->final_path);
        mem_free(f->tmp_path);
        memset(f, 0, sizeof *f);
        return -1;
    }
    return 0;
}

/* Makes the rename durable: fsync of the directory that holds path. Best
 * effort (the file itself is already complete and renamed), and without a
 * heap copy, so that it cannot fail half-way for lack of memory. */
static void fsync_dir_of(const char *path) {
    char copy[PATH_MAX];
    if (strlen(path) >= sizeof copy) return;
    strcpy(copy, path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return;
    fsync(fd);
    close(fd);
}

int atomic_commit(AtomicFile *f) {
    int failed = 0, e = 0;
    if (fflush(f->fp) != 0) {
        failed = 1;
        e = errno;
    }
    if (!failed && ferror(f->fp)) {
        failed = 1;
        e = EIO;
    }
    if (!failed && inject_write_failure()) {
        failed = 1;
        e = EIO;
    }
    if (!failed && fsync(fileno(f->fp)) != 0) {
        failed = 1;
        e = errno;
    }
    if (fclose(f->fp) != 0 && !failed) {
        failed = 1;
        e = errno;
    }
    f->fp = NULL;
    if (!failed && rename(f->tmp_path, f->final_path) != 0) {
        failed = 1;
        e = errno;
    }
    if (failed) {
        error_set("%s: write failed: %s (the previous file, if any, is unchanged)", f->final_path, strerror(e));
        unlink(f->tmp_path);
        mem_free(f->final_path);
        mem_free(f->tmp_path);
        memset(f, 0, sizeof *f);
        return -1;
    }
    fsync_dir_of(f->final_path);
    mem_free(f->final_path);
    mem_free(f->tmp_path);
    memset(f, 0, sizeof *f);
    return 0;
}

/* PID of a name "NAME.tmp.PID", or 0. */
static long stale_tmp_pid(const char *name) {
    const char *t = strstr(name, ".tmp.");
    if (!t || t == name) return 0;
    const char *digits = t + 5;
    for (;;) { /* the last ".tmp." of the name */
        const char *next = strstr(digits, ".tmp.");
        if (!next) break;
        digits = next + 5;
    }
    char *end;
    long pid = strtol(digits, &end, 10);
    return *digits && *end == '\0' && pid > 0 ? pid : 0;
}

long atomic_remove_stale(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        error_set("%s: cannot read the directory: %s", dir, strerror(errno));
        return -1;
    }
    long removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long pid = stale_tmp_pid(e->d_name);
        if (!pid || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive (or not ours to judge) */
        size_t n = strlen(dir) + strlen(e->d_name) + 2;
        char *path = mem_alloc(n);
        if (!path) {
            closedir(d);
            return -1;
        }
        snprintf(path, n, "%s/%s", dir, e->d_name);
        if (unlink(path) == 0) removed++;
        mem_free(path);
    }
    closedir(d);
    if (removed > 0)
        log_warning("%s: removed %ld temporary file%s left by an interrupted save", dir, removed,
                    removed == 1 ? "" : "s");
    return removed;
}

void atomic_abort(AtomicFile *f) {
    if (f->fp) fclose(f->fp);
    if (f->tmp_path) unlink(f->tmp_path);
    mem_free(f->final_path);
    mem_free(f->tmp_path);
    memset(f, 0, sizeof *f);
}

int atomic_write_file(const char *path, const void *data, size_t size) {
    AtomicFile f;
    TRY(atomic_open(&f, path));
    if (size && fwrite(data, 1, size, f.fp) != size) {
        error_set("%s: write failed: %s", path, strerror(errno));
        atomic_abort(&f);
        return -1;
    }
    return atomic_commit(&f);
}
