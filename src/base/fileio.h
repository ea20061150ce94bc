/* fileio.h: read-only file mappings, whole-file reads, and atomic writes
 * (temporary file in the same directory, fsync, rename, fsync of the
 * directory) so a crash never leaves a half-written output behind. */
#ifndef LT_FILEIO_H
#define LT_FILEIO_H
#include <stddef.h>
#include <stdio.h>
#include <stdbool.h>

typedef struct {
    const unsigned char *data; /* NULL for an empty file */
    size_t size;
    char *path;                /* owned copy, for error messages */
} MappedFile;

int file_map(MappedFile *m, const char *path);   /* -1 + "PATH: reason" */
void file_unmap(MappedFile *m);

/* Which pages of a mapped file are resident. A fault on a mapped file maps
 * the page cache's whole folio (up to 2 MiB on Linux 6.x with large folios),
 * not only the page read, so what a run reads in place does not alone decide
 * its resident set. file_map_keep settles it: the pages that intersect the
 * given byte ranges are faulted in, every other page of the mapping is
 * dropped, and no page outside the ranges is read afterwards. The memory
 * planner counts the same pages with file_pages_covering. */
typedef struct {
    size_t begin, end;  /* [begin, end) in bytes from the start of the file */
} ByteRange;
/* Pages (of the system's page size) that intersect any range, in a file of
 * `size` bytes; the ranges may overlap and come in any order (sorted here). */
size_t file_pages_covering(ByteRange *ranges, size_t n, size_t size);
size_t file_page_size(void);
int file_map_keep(const MappedFile *m, ByteRange *ranges, size_t n);
/* Drops from the resident set the pages that lie wholly inside the n bytes
 * at p (a pointer into the mapping; nothing when it is not in it): a stream
 * that has consumed them (convert) keeps only what it still reads. */
int file_map_drop(const MappedFile *m, const void *p, size_t n);
/* Reads bytes [offset, offset + n) of PATH into dst with pread: no mapping
 * is touched, so nothing of the file becomes resident. */
int file_read_at(const char *path, size_t offset, void *dst, size_t n);
/* Reads a whole file into a NUL-terminated heap buffer, refusing files over
 * max_bytes (0 = no limit). */
int file_read_all(const char *path, size_t max_bytes, char **out, size_t *out_size);
bool file_exists(const char *path);
bool dir_exists(const char *path);
int dir_ensure(const char *path);                /* mkdir -p */
char *path_join(const char *dir, const char *name); /* heap; NULL + error */

typedef struct {
    FILE *fp;          /* write through this */
    char *final_path;
    char *tmp_path;
} AtomicFile;

int atomic_open(AtomicFile *f, const char *path);
/* Flushes, fsyncs, renames over the final path and fsyncs the directory.
 * On any failure the temporary file is removed and the old file is intact. */
int atomic_commit(AtomicFile *f);
void atomic_abort(AtomicFile *f);
/* Removes DIR's temporary files ("NAME.tmp.PID") whose writer PID is no
 * longer alive: what a process killed inside a save (kill -9, power loss)
 * leaves behind. Files of live processes are kept. Prints one warning on
 * stderr when it removed any ("[WARNING] DIR: removed N temporary files
 * left by an interrupted save"). Returns the number removed (0 when DIR
 * does not exist), or -1 on an unreadable directory. */
long atomic_remove_stale(const char *dir);
/* Convenience: writes one buffer atomically. */
int atomic_write_file(const char *path, const void *data, size_t size);

/* Test hook: make the nth write/fsync of atomic files fail with EIO (0 = off).
 * Also read from env LMTUNE_FAIL_WRITE. */
void fileio_fail_write_at(long n);
#endif
