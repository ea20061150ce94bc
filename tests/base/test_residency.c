/* test_residency.c: file_map_keep leaves exactly the pages that
 * file_pages_covering counts resident in a mapping, whatever the kernel
 * mapped on its own. A 16 MiB file written with write() (whose page cache
 * may hold large folios, which a single fault maps whole) is mapped; reads
 * scattered over it first make the kernel map far more than the pages read;
 * after file_map_keep the mapping's Rss in /proc/self/smaps must equal the
 * counted pages, for scattered rows, adjacent and overlapping ranges, ranges
 * in any order, a range past the end, and none at all. The counting itself
 * is checked on cases worked out by hand. */
#include "check.h"
#include "base/fileio.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Resident bytes of the mapping that contains addr (smaps' Rss). */
static size_t rss_of(const void *addr) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return (size_t)-1;
    char line[512];
    uintptr_t a = (uintptr_t)addr;
    int inside = 0;
    size_t rss = (size_t)-1;
    while (fgets(line, sizeof line, f)) {
        unsigned long s, e;
        char c;
        if (sscanf(line, "%lx-%lx %c", &s, &e, &c) == 3 && strchr(line, '-') < strchr(line, ' ')) {
            inside = a >= s && a < e;
            continue;
        }
        if (inside && !strncmp(line, "Rss:", 4)) {
            rss = strtoull(line + 4, NULL, 10) * 1024;
            inside = 0;
        }
    }
    fclose(f);
    return rss;
}

static void touch_everywhere(const MappedFile *m) {
    volatile unsigned char sink = 0;
    for (size_t off = 0; off < m->size; off += 1 << 20) sink ^= m->data[off];
    (void)sink;
}

static void keep_case(const MappedFile *m, ByteRange *r, size_t n, const char *what) {
    ByteRange copy[64];
    if (n) memcpy(copy, r, n * sizeof *r);
    size_t pages = file_pages_covering(copy, n, m->size);
    touch_everywhere(m);
    CHECK(file_map_keep(m, r, n) == 0);
    size_t rss = rss_of(m->data);
    CHECK_MSG(rss == pages * file_page_size(), "%s: Rss %zu bytes, %zu pages counted (%zu bytes)", what, rss, pages,
              pages * file_page_size());
    printf("%s: %zu pages kept, Rss %zu bytes\n", what, pages, rss);
}

int main(void) {
    size_t pg = file_page_size();
    /* counting by hand (4 KiB pages assumed by these numbers) */
    if (pg == 4096) {
        ByteRange a[] = {{0, 1}, {4095, 4097}, {10000, 10001}};
        CHECK(file_pages_covering(a, 3, 1 << 20) == 3);           /* pages 0, 0-1, 2 */
        ByteRange b[] = {{8192, 12288}, {0, 4096}, {12288, 12289}};
        CHECK(file_pages_covering(b, 3, 1 << 20) == 3);           /* pages 2, 0, 3 */
        ByteRange c[] = {{5000, 4000}, {1 << 21, (1 << 21) + 10}};
        CHECK(file_pages_covering(c, 2, 1 << 20) == 0);           /* empty, past the end */
        ByteRange d[] = {{100, 50000}, {200, 300}};
        CHECK(file_pages_covering(d, 2, 1 << 20) == 13);          /* 0 .. 12 */
        ByteRange e[] = {{(1 << 20) - 10, (1 << 20) + 4096}};
        CHECK(file_pages_covering(e, 1, 1 << 20) == 1);           /* clipped to the file */
    }

    char path[128];
    snprintf(path, sizeof path, "/tmp/lmtune_residency_%d", (int)getpid());
    size_t size = 16u << 20;
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    char *buf = malloc(1 << 20);
    for (int i = 0; i < 16; i++) {
        memset(buf, 'a' + i, 1 << 20);
        CHECK(fwrite(buf, 1, 1 << 20, f) == 1 << 20);
    }
    fclose(f);
    free(buf);
    MappedFile m;
    CHECK(file_map(&m, path) == 0);
    touch_everywhere(&m);
    printf("after 16 single-byte reads 1 MiB apart: Rss %zu bytes\n", rss_of(m.data));

    /* rows of 1536 bytes scattered over the file, as an embedding's */
    ByteRange rows[40];
    for (int i = 0; i < 40; i++) {
        size_t row = (size_t)(i * 7919 % 10000);
        rows[i].begin = 4096 + row * 1536;
        rows[i].end = rows[i].begin + 1536;
    }
    keep_case(&m, rows, 40, "40 scattered rows");
    ByteRange mixed[] = {{5u << 20, 7u << 20}, {100, 200}, {6u << 20, (6u << 20) + 1}, {(15u << 20) + 7, size + 99}};
    keep_case(&m, mixed, 4, "overlapping, unsorted, past the end");
    ByteRange all[] = {{0, size}};
    keep_case(&m, all, 1, "the whole file");
    keep_case(&m, NULL, 0, "nothing");
    /* reading a kept page afterwards maps nothing new */
    ByteRange one[] = {{3u << 20, (3u << 20) + 1}};
    keep_case(&m, one, 1, "one page");
    volatile unsigned char x = m.data[(3u << 20) + 100];
    (void)x;
    CHECK(rss_of(m.data) == pg);
    file_unmap(&m);
    unlink(path);
    return check_finish("base/residency");
}
