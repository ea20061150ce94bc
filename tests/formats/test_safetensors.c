/* test_safetensors.c: every safetensors case of the bad-input checklist
 * (tests/../bad-inputs.md), built as bytes in a temporary directory: each
 * rejected file gives the expected one-line error naming the file and the
 * tensor, each accepted one loads with the right shapes and data. Also the
 * writer (round trip, atomicity), header-only opening, sharded model
 * directories, and allocation failure at every site. */
#include "check.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/rng.h"
#include "formats/safetensors.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

static char tmpdir[64];

static char *tmp_path(const char *name) {
    static char buf[8][256];
    static int slot = 0;
    char *p = buf[slot++ % 8];
    snprintf(p, 256, "%s/%s", tmpdir, name);
    return p;
}

static void write_raw(const char *path, const void *bytes, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp) { perror(path); exit(2); }
    if (n) fwrite(bytes, 1, n, fp);
    fclose(fp);
}

/* With LMTUNE_SEED_CORPUS=DIR, every crafted file is also saved there (the
 * fuzzer's seed corpus, tests/fuzz/corpus/safetensors, tests/fuzz/run.sh --regen). */
static void corpus_save(const char *name, const void *bytes, size_t n) {
    const char *dir = getenv("LMTUNE_SEED_CORPUS");
    if (!dir) return;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    write_raw(p, bytes, n);
}

/* A file: 8-byte N (= strlen(header) unless n_override >= 0), header, data. */
static const char *make_st_n(const char *name, const char *header, size_t hlen, const void *data, size_t dlen, long long n_override) {
    const char *path = tmp_path(name);
    unsigned char *buf = malloc(8 + hlen + dlen + 1);
    uint64_t n = n_override >= 0 ? (uint64_t)n_override : hlen;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(n >> (8 * i));
    memcpy(buf + 8, header, hlen);
    if (dlen) memcpy(buf + 8 + hlen, data, dlen);
    write_raw(path, buf, 8 + hlen + dlen);
    corpus_save(name, buf, 8 + hlen + dlen);
    free(buf);
    return path;
}
static const char *make_st(const char *name, const char *header, const void *data, size_t dlen) {
    return make_st_n(name, header, strlen(header), data, dlen, -1);
}

static unsigned char zeros[256];

/* Opens must fail (both full and header-only) with `needle` in the message,
 * which also names the file. */
static void expect_reject(const char *path, const char *needle) {
    StFile f;
    int rc = st_open(&f, path);
    CHECK_MSG(rc == -1, "%s accepted, expected \"%s\"", path, needle);
    CHECK_ERROR_CONTAINS(needle);
    CHECK_ERROR_CONTAINS(path);
    CHECK(strchr(error_message(), '\n') == NULL);
    CHECK(f.tensors == NULL && f.map.data == NULL); /* cleaned up */
    rc = st_open_header(&f, path);
    CHECK_MSG(rc == -1, "%s accepted header-only, expected \"%s\"", path, needle);
    CHECK_ERROR_CONTAINS(needle);
}

static void test_header_length(void) {
    expect_reject(make_st_n("empty.st", "", 0, NULL, 0, -1) /* 8 bytes of N=0 */, "not valid JSON");
    write_raw(tmp_path("zero.st"), "", 0);
    corpus_save("zero.st", "", 0);
    expect_reject(tmp_path("zero.st"), "file is 0 bytes, too small");
    for (int n = 1; n <= 7; n++) {
        write_raw(tmp_path("short.st"), "\x02\0\0\0\0\0\0", (size_t)n);
        if (n == 7) corpus_save("short.st", "\x02\0\0\0\0\0\0", 7);
        char want[64];
        snprintf(want, sizeof want, "file is %d bytes, too small", n);
        expect_reject(tmp_path("short.st"), want);
    }
    /* N past EOF */
    expect_reject(make_st_n("past.st", "{}", 2, NULL, 0, 3), "header length 3 runs past the end of the file (10 bytes)");
    expect_reject(make_st_n("past2.st", "{}", 2, NULL, 0, 100000000), "header length 100000000 runs past the end");
    /* N = 2^64-1 and N > 1e8 (the reference checks the limit first, so the
     * 8+N overflow is caught as "too large") */
    const char *p = tmp_path("huge.st");
    unsigned char b[10] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
    write_raw(p, b, 10);
    corpus_save("huge.st", b, 10);
    expect_reject(p, "header length 18446744073709551615 exceeds the limit of 100000000 bytes");
    b[0] = 0xf9; /* 2^64 - 7: 8 + N overflows */
    write_raw(p, b, 10);
    expect_reject(p, "exceeds the limit");
    expect_reject(make_st_n("big.st", "{}", 2, NULL, 0, 100000001), "header length 100000001 exceeds the limit");
}

static void test_header_text(void) {
    expect_reject(make_st("utf8.st", "{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", zeros, 4),
                  "header is not valid UTF-8 (byte 3 of the header)");
    expect_reject(make_st("overlong.st", "{\"\xc0\x80\":1}", NULL, 0), "not valid UTF-8");
    expect_reject(make_st("surrogate.st", "{\"\xed\xa0\x80\":1}", NULL, 0), "not valid UTF-8");
    expect_reject(make_st("trunc_utf8.st", "{}\xe2\x82", NULL, 0), "not valid UTF-8 (byte 2");
    expect_reject(make_st("notjson.st", "{\"a\": ", NULL, 0), "header is not valid JSON");
    expect_reject(make_st("array.st", "[]", NULL, 0), "header is not a JSON object");
    expect_reject(make_st("number.st", "42", NULL, 0), "not valid JSON");
    expect_reject(make_st_n("nul.st", "{}\0 ", 4, NULL, 0, -1), "not valid JSON");
    expect_reject(make_st("entry.st", "{\"a\": 3}", NULL, 0), "tensor \"a\": entry must be an object");
    expect_reject(make_st("nodtype.st", "{\"a\": {\"shape\":[],\"data_offsets\":[0,4]}}", zeros, 4), "tensor \"a\": missing field \"dtype\"");
    expect_reject(make_st("noshape.st", "{\"a\": {\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", zeros, 4), "tensor \"a\": missing field \"shape\"");
    expect_reject(make_st("nooff.st", "{\"a\": {\"dtype\":\"F32\",\"shape\":[]}}", zeros, 4), "tensor \"a\": missing field \"data_offsets\"");
    /* dtype: unknown, lowercase, not a string */
    expect_reject(make_st("f31.st", "{\"w\":{\"dtype\":\"F31\",\"shape\":[1],\"data_offsets\":[0,4]}}", zeros, 4), "tensor \"w\": unknown dtype \"F31\"");
    expect_reject(make_st("lower.st", "{\"w\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", zeros, 4), "tensor \"w\": unknown dtype \"f32\"");
    expect_reject(make_st("dtnum.st", "{\"w\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", zeros, 4), "field \"dtype\" must be a string");
    /* dims: negative, float, string, not an array, rank too large */
    expect_reject(make_st("neg.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,4]}}", zeros, 4), "tensor \"w\": shape[1] must be a non-negative integer");
    expect_reject(make_st("flt.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", zeros, 4), "tensor \"w\": shape[0] must be a non-negative integer");
    expect_reject(make_st("str.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", zeros, 4), "tensor \"w\": shape[0] must be a non-negative integer");
    expect_reject(make_st("shp.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", zeros, 4), "field \"shape\" must be an array");
    expect_reject(make_st("rank9.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", zeros, 4), "rank 9 is more than the supported 8");
    /* data_offsets with 1 or 3 items, or bad items */
    expect_reject(make_st("off1.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", zeros, 4), "tensor \"w\": field \"data_offsets\" must be [begin, end] (2 integers, got 1)");
    expect_reject(make_st("off3.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", zeros, 4), "(2 integers, got 3)");
    expect_reject(make_st("offobj.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{\"begin\":0}}}", zeros, 4), "tensor \"w\": field \"data_offsets\" must be [begin, end]");
    expect_reject(make_st("offneg.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", zeros, 4), "tensor \"w\": data_offsets[0] must be a non-negative integer");
    expect_reject(make_st("offflt.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.0]}}", zeros, 4), "tensor \"w\": data_offsets[1] must be a non-negative integer");
    /* duplicate name (the reference keeps the last; we refuse) */
    expect_reject(make_st("dup.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                    "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", zeros, 8),
                  "duplicate key \"w\"");
    /* __metadata__: non-string values, not an object */
    expect_reject(make_st("meta.st", "{\"__metadata__\":{\"format\":\"pt\",\"n\":3}}", NULL, 0), "__metadata__: value of \"n\" must be a string");
    expect_reject(make_st("meta2.st", "{\"__metadata__\":[\"pt\"]}", NULL, 0), "__metadata__ must be an object of strings");
}

static void test_offsets(void) {
    const char *E = "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":";
    char h[512];
    snprintf(h, sizeof h, "{\"a\":%s[8,0]}}", E);
    expect_reject(make_st("endlt.st", h, zeros, 8), "tensor \"a\": data_offsets end 0 < begin 8");
    snprintf(h, sizeof h, "{\"a\":%s[0,8]},\"b\":%s[12,20]}}", E, E);
    expect_reject(make_st("gap.st", h, zeros, 20), "tensor \"b\": data_offsets begin 12 leaves a gap after tensor \"a\" which ends at 8");
    snprintf(h, sizeof h, "{\"a\":%s[4,12]}}", E);
    expect_reject(make_st("gap0.st", h, zeros, 12), "tensor \"a\": data_offsets begin 4 leaves a gap at the start");
    snprintf(h, sizeof h, "{\"a\":%s[0,8]},\"b\":%s[4,12]}}", E, E);
    expect_reject(make_st("overlap.st", h, zeros, 12), "tensor \"b\": data_offsets [4, 12) overlap tensor \"a\" [0, 8)");
    snprintf(h, sizeof h, "{\"a\":%s[0,8]},\"b\":%s[0,8]}}", E, E);
    expect_reject(make_st("alias.st", h, zeros, 8), "tensors \"a\" and \"b\" share the byte range [0, 8)");
    /* size vs shape x dtype */
    snprintf(h, sizeof h, "{\"a\":%s[0,12]}}", E);
    expect_reject(make_st("size.st", h, zeros, 12), "tensor \"a\": data_offsets [0, 12) hold 12 bytes but shape [2] of F32 needs 8");
    /* shape product overflow, and elements x bits overflow */
    expect_reject(make_st("ovf.st", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,2],\"data_offsets\":[0,0]}}", NULL, 0),
                  "tensor \"a\": shape [4294967296, 4294967296, 2] of U8 overflows");
    expect_reject(make_st("ovf2.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", NULL, 0),
                  "tensor \"a\": shape [4611686018427387904] of F32 overflows");
    /* sub-byte dtype: 3 x 4 bits */
    expect_reject(make_st("f4.st", "{\"q\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", zeros, 2),
                  "tensor \"q\": 3 elements of F4 (4 bits each) are not a whole number of bytes");
    expect_reject(make_st("f6.st", "{\"q\":{\"dtype\":\"F6_E2M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", zeros, 2), "are not a whole number of bytes");
    /* trailing bytes (polyglot) and a buffer short by one byte */
    snprintf(h, sizeof h, "{\"a\":%s[0,8]}}", E);
    size_t hl = strlen(h);
    char want[160];
    snprintf(want, sizeof want, "should end at byte %zu (8 + header %zu + last tensor end 8) but the file has %zu bytes (trailing bytes)", 16 + hl, hl, 17 + hl);
    expect_reject(make_st("trail.st", h, zeros, 9), want);
    snprintf(want, sizeof want, "but the file has %zu bytes (file is truncated)", 15 + hl);
    expect_reject(make_st("shortbuf.st", h, zeros, 7), want);
}

static void test_accepted(void) {
    StFile f;
    /* leading and trailing whitespace, unaligned offsets, zero-size and rank-0
     * tensors, metadata, a sub-byte dtype with whole bytes */
    float vals[3] = {1.5f, -2.0f, 3.25f};
    unsigned char data[32] = {0};
    data[0] = 0x5a;                         /* u8 "b" at [0,1) */
    memcpy(data + 1, vals, 12);             /* f32 "a" at [1,13): unaligned */
    data[13] = 0x7f;                        /* f4 "q" x2 at [13,14) */
    float scalar = 42.0f;
    memcpy(data + 14, &scalar, 4);          /* rank-0 "s" at [14,18) */
    const char *h = " \n\t{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[1,13],\"extra\":1},"
                    "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                    "\"z\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[13,13]},"
                    "\"z2\":{\"dtype\":\"BF16\",\"shape\":[4,0],\"data_offsets\":[13,13]},"
                    "\"q\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[13,14]},"
                    "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[14,18]}}   \n ";
    const char *path = make_st("ok.st", h, data, 18);
    CHECK(st_open(&f, path) == 0);
    CHECK(f.n_tensors == 6);
    CHECK(f.header_len == strlen(h));
    for (size_t i = 1; i < f.n_tensors; i++) CHECK(strcmp(f.tensors[i - 1].name, f.tensors[i].name) < 0);
    const StTensor *a = st_find(&f, "a"), *s = st_find(&f, "s"), *z = st_find(&f, "z"), *q = st_find(&f, "q");
    CHECK(a && a->dtype == DTYPE_F32 && a->ndim == 1 && a->shape[0] == 3 && a->nelem == 3 && a->begin == 1 && a->end == 13);
    if (a) { float got[3]; memcpy(got, a->data, 12); CHECK(got[0] == 1.5f && got[1] == -2.0f && got[2] == 3.25f); }
    CHECK(s && s->ndim == 0 && s->nelem == 1);
    if (s) { float got; memcpy(&got, s->data, 4); CHECK(got == 42.0f); }
    CHECK(z && z->ndim == 2 && z->nelem == 0 && z->shape[0] == 0 && z->shape[1] == 4);
    CHECK(q && q->dtype == DTYPE_F4 && q->nelem == 2);
    CHECK(st_find(&f, "nope") == NULL && st_find(&f, "__metadata__") == NULL);
    CHECK(st_meta(&f, "format") && strcmp(st_meta(&f, "format"), "pt") == 0);
    CHECK(st_meta(&f, "other") == NULL);
    CHECK(((const unsigned char *)st_find(&f, "b")->data)[0] == 0x5a);
    st_close(&f);
    /* header-only: same tensors, no data */
    CHECK(st_open_header(&f, path) == 0);
    CHECK(f.n_tensors == 6 && f.map.data == NULL);
    a = st_find(&f, "a");
    CHECK(a && a->data == NULL && a->nelem == 3 && a->begin == 1);
    CHECK(st_tensor_count_nonfinite(a) == 0);
    st_close(&f);
    /* an empty header object and no data, null metadata */
    CHECK(st_open(&f, make_st("emptyobj.st", "{}", NULL, 0)) == 0 && f.n_tensors == 0);
    st_close(&f);
    CHECK(st_open(&f, make_st("nullmeta.st", "{\"__metadata__\":null}", NULL, 0)) == 0 && f.n_meta == 0);
    st_close(&f);
    /* two zero-size tensors at one offset are fine (no bytes shared) */
    CHECK(st_open(&f, make_st("zz.st", "{\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                                        "\"y\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", NULL, 0)) == 0);
    st_close(&f);
    /* missing file and a directory */
    CHECK(st_open(&f, tmp_path("does-not-exist.st")) == -1);
    CHECK_ERROR_CONTAINS("does-not-exist.st: cannot open");
    CHECK(st_open_header(&f, tmpdir) == -1);
    CHECK_ERROR_CONTAINS("not a regular file");
}

static void test_nonfinite(void) {
    float v[6] = {0, 1, NAN, INFINITY, -INFINITY, 3};
    uint16_t b[6], hf[6];
    for (int i = 0; i < 6; i++) { b[i] = f32_to_bf16(v[i]); hf[i] = f32_to_f16(v[i]); }
    double d[2] = {NAN, 1.0};
    StWriteTensor ts[4] = {
        {.name = "f32", .dtype = DTYPE_F32, .ndim = 1, .shape = {6}, .data = v},
        {.name = "bf16", .dtype = DTYPE_BF16, .ndim = 2, .shape = {2, 3}, .data = b},
        {.name = "f16", .dtype = DTYPE_F16, .ndim = 1, .shape = {6}, .data = hf},
        {.name = "f64", .dtype = DTYPE_F64, .ndim = 1, .shape = {2}, .data = d},
    };
    const char *path = tmp_path("nan.safetensors");
    CHECK(st_write(path, ts, 4, NULL, NULL, 0) == 0);
    MappedFile mf;
    if (file_map(&mf, path) == 0) { corpus_save("nan.safetensors", mf.data, mf.size); file_unmap(&mf); }
    StFile f;
    CHECK(st_open(&f, path) == 0);
    CHECK(st_tensor_count_nonfinite(st_find(&f, "f32")) == 3);
    CHECK(st_tensor_count_nonfinite(st_find(&f, "bf16")) == 3);
    CHECK(st_tensor_count_nonfinite(st_find(&f, "f16")) == 3);
    CHECK(st_tensor_count_nonfinite(st_find(&f, "f64")) == 1);
    st_close(&f);
}

static size_t count_dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    size_t n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static void test_writer(void) {
    float w[6] = {1, 2, 3, 4, 5, 6};
    uint16_t bf[4] = {f32_to_bf16(0.5f), f32_to_bf16(-1), f32_to_bf16(2), f32_to_bf16(7)};
    int32_t i0 = -7;
    StWriteTensor ts[4] = {
        {.name = "layer.weight", .dtype = DTYPE_F32, .ndim = 2, .shape = {2, 3}, .data = w},
        {.name = "a.bias \"quoted\"", .dtype = DTYPE_BF16, .ndim = 1, .shape = {4}, .data = bf},
        {.name = "scalar", .dtype = DTYPE_I32, .ndim = 0, .data = &i0},
        {.name = "empty", .dtype = DTYPE_F16, .ndim = 2, .shape = {0, 5}, .data = NULL},
    };
    const char *mk[2] = {"format", "note"}, *mv[2] = {"pt", "ünïcode"};
    const char *path = tmp_path("rt.safetensors");
    CHECK(st_write(path, ts, 4, mk, mv, 2) == 0);
    MappedFile mf;
    if (file_map(&mf, path) == 0) { corpus_save("roundtrip.safetensors", mf.data, mf.size); file_unmap(&mf); }
    StFile f;
    CHECK(st_open(&f, path) == 0);
    CHECK(f.n_tensors == 4 && f.header_len % 8 == 0);
    CHECK(f.map.data[8] == '{' && strchr("} ", f.map.data[8 + f.header_len - 1]));
    for (int i = 0; i < 4; i++) {
        const StTensor *t = st_find(&f, ts[i].name);
        CHECK_MSG(t != NULL, "%s", ts[i].name);
        if (!t) continue;
        CHECK(t->dtype == ts[i].dtype && t->ndim == ts[i].ndim);
        for (int d = 0; d < t->ndim; d++) CHECK(t->shape[d] == ts[i].shape[d]);
        size_t bytes = t->end - t->begin;
        CHECK(bytes == t->nelem * (size_t)dtype_bits(t->dtype) / 8);
        if (bytes) CHECK(memcmp(t->data, ts[i].data, bytes) == 0);
    }
    /* written in the given order: the first tensor starts at 0 */
    CHECK(st_find(&f, "layer.weight")->begin == 0 && st_find(&f, "a.bias \"quoted\"")->begin == 24);
    CHECK(strcmp(st_meta(&f, "note"), "ünïcode") == 0);
    /* the header is JSON with __metadata__ first */
    CHECK(memcmp(f.map.data + 8, "{\"__metadata__\"", 15) == 0);
    st_close(&f);
    /* no metadata, no tensors */
    CHECK(st_write(tmp_path("none.safetensors"), NULL, 0, NULL, NULL, 0) == 0);
    CHECK(st_open(&f, tmp_path("none.safetensors")) == 0 && f.n_tensors == 0 && f.header_len == 8);
    st_close(&f);

    /* refusals leave nothing behind */
    size_t before = count_dir_entries(tmpdir);
    StWriteTensor dup[2] = {ts[0], ts[0]};
    CHECK(st_write(tmp_path("dup.safetensors"), dup, 2, NULL, NULL, 0) == -1);
    CHECK_ERROR_CONTAINS("tensor \"layer.weight\" given twice");
    StWriteTensor sub = {.name = "q", .dtype = DTYPE_F4, .ndim = 1, .shape = {3}, .data = w};
    CHECK(st_write(tmp_path("f4.safetensors"), &sub, 1, NULL, NULL, 0) == -1);
    CHECK_ERROR_CONTAINS("not a whole number of bytes");
    StWriteTensor meta = {.name = "__metadata__", .dtype = DTYPE_F32, .ndim = 0, .data = w};
    CHECK(st_write(tmp_path("m.safetensors"), &meta, 1, NULL, NULL, 0) == -1);
    CHECK(st_write(tmp_path("no/such/dir/x.safetensors"), ts, 1, NULL, NULL, 0) == -1);
    CHECK_ERROR_CONTAINS("x.safetensors: cannot write");
    CHECK(count_dir_entries(tmpdir) == before);

    /* injected EIO at fsync time: the old file is intact, no temp file */
    fileio_fail_write_at(1);
    CHECK(st_write(path, ts + 2, 1, NULL, NULL, 0) == -1);
    CHECK_ERROR_CONTAINS("rt.safetensors: write failed");
    fileio_fail_write_at(0);
    CHECK(count_dir_entries(tmpdir) == before);
    CHECK(st_open(&f, path) == 0 && f.n_tensors == 4);
    st_close(&f);
}

/* A sharded directory: a.safetensors {x, y}, b.safetensors {z}. */
static const char *make_sharded(const char *name, const char *index_json, bool z_in_a_too) {
    static char dir[256];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    mkdir(dir, 0755);
    float v[4] = {1, 2, 3, 4};
    StWriteTensor x = {.name = "x", .dtype = DTYPE_F32, .ndim = 1, .shape = {2}, .data = v};
    StWriteTensor y = {.name = "y", .dtype = DTYPE_F32, .ndim = 1, .shape = {2}, .data = v + 2};
    StWriteTensor z = {.name = "z", .dtype = DTYPE_F32, .ndim = 2, .shape = {1, 1}, .data = v};
    StWriteTensor a[3] = {x, y, z};
    char p[300];
    snprintf(p, sizeof p, "%s/a.safetensors", dir);
    CHECK(st_write(p, a, z_in_a_too ? 3 : 2, NULL, NULL, 0) == 0);
    snprintf(p, sizeof p, "%s/b.safetensors", dir);
    CHECK(st_write(p, &z, 1, NULL, NULL, 0) == 0);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_raw(p, index_json, strlen(index_json));
    return dir;
}

static void test_sharded(void) {
    StModel m;
    const char *good = "{\"metadata\":{\"total_size\":20},\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"a.safetensors\",\"z\":\"b.safetensors\"}}";
    const char *dir = make_sharded("sharded", good, false);
    for (int header_only = 0; header_only < 2; header_only++) {
        CHECK(st_model_open(&m, dir, header_only) == 0);
        CHECK(m.n_files == 2);
        const StFile *f;
        const StTensor *z = st_model_find_in(&m, "z", &f);
        CHECK(z && strstr(f->path, "b.safetensors") && z->ndim == 2);
        CHECK(st_model_find(&m, "x") && st_model_find(&m, "w") == NULL);
        if (!header_only) { float got; memcpy(&got, st_model_find(&m, "y")->data, 4); CHECK(got == 3.0f); }
        else CHECK(st_model_find(&m, "y")->data == NULL);
        st_model_close(&m);
    }
    /* missing shard */
    dir = make_sharded("missing", "{\"weight_map\":{\"x\":\"a.safetensors\",\"z\":\"c.safetensors\"}}", false);
    CHECK(st_model_open(&m, dir, false) == -1);
    CHECK_ERROR_CONTAINS("missing/model.safetensors.index.json: shard \"c.safetensors\" does not exist");
    /* listed in a shard that does not have it */
    dir = make_sharded("wrongshard", "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\",\"z\":\"b.safetensors\"}}", false);
    CHECK(st_model_open(&m, dir, false) == -1);
    CHECK_ERROR_CONTAINS("index.json: tensor \"y\" is listed in shard \"b.safetensors\" but that file does not contain it");
    /* a tensor in two shards */
    dir = make_sharded("twice", good, true);
    CHECK(st_model_open(&m, dir, true) == -1);
    CHECK_ERROR_CONTAINS("twice: tensor \"z\" is in two shards:");
    CHECK_ERROR_CONTAINS("a.safetensors and ");
    /* a key twice in the index, bad JSON, path traversal, no weight_map */
    dir = make_sharded("dupidx", "{\"weight_map\":{\"x\":\"a.safetensors\",\"x\":\"b.safetensors\"}}", false);
    CHECK(st_model_open(&m, dir, false) == -1);
    CHECK_ERROR_CONTAINS("dupidx/model.safetensors.index.json: not valid JSON: duplicate object key");
    dir = make_sharded("badidx", "{\"weight_map\":", false);
    CHECK(st_model_open(&m, dir, false) == -1);
    CHECK_ERROR_CONTAINS("badidx/model.safetensors.index.json: not valid JSON");
    dir = make_sharded("escape", "{\"weight_map\":{\"x\":\"../sharded/a.safetensors\"}}", false);
    CHECK(st_model_open(&m, dir, false) == -1);
    CHECK_ERROR_CONTAINS("must be a plain file name");
    dir = make_sharded("nomap", "{\"metadata\":{}}", false);
    CHECK(st_model_open(&m, dir, false) == -1);
    CHECK_ERROR_CONTAINS("nomap/model.safetensors.index.json: missing object field \"weight_map\"");
    dir = make_sharded("emptymap", "{\"weight_map\":{}}", false);
    CHECK(st_model_open(&m, dir, false) == -1);
    CHECK_ERROR_CONTAINS("\"weight_map\" is empty");
    /* a bad shard: its own error, naming it */
    dir = make_sharded("badshard", good, false);
    char p[300];
    snprintf(p, sizeof p, "%s/b.safetensors", dir);
    write_raw(p, "\x02\0\0\0\0\0\0\0{}x", 11);
    CHECK(st_model_open(&m, dir, true) == -1);
    CHECK_ERROR_CONTAINS("badshard/b.safetensors: the data should end at byte 10");
    /* neither file; no directory */
    mkdir(tmp_path("emptydir"), 0755);
    CHECK(st_model_open(&m, tmp_path("emptydir"), false) == -1);
    CHECK_ERROR_CONTAINS("emptydir: no model.safetensors or model.safetensors.index.json");
    CHECK(st_model_open(&m, tmp_path("nodir"), false) == -1);
    CHECK_ERROR_CONTAINS("nodir: model directory does not exist");
    /* single file wins over an index */
    dir = make_sharded("single", "not json", false);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    float v = 1;
    StWriteTensor t = {.name = "only", .dtype = DTYPE_F32, .ndim = 1, .shape = {1}, .data = &v};
    CHECK(st_write(p, &t, 1, NULL, NULL, 0) == 0);
    CHECK(st_model_open(&m, dir, false) == 0 && m.n_files == 1 && st_model_find(&m, "only"));
    st_model_close(&m);
}

/* Allocation failure at every site: an error, no crash, no leak of state;
 * the call succeeds once the failure point lies past its last allocation. */
static void test_alloc_failures(void) {
    const char *path = tmp_path("rt.safetensors");
    const char *dir = make_sharded("faults", "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"a.safetensors\",\"z\":\"b.safetensors\"}}", false);
    int sites = 0, ok_runs = 0;
    for (int which = 0; which < 4; which++) {
        for (long k = 1; k < 1000; k++) {
            mem_fail_at(k);
            error_clear();
            int rc;
            StFile f; StModel m;
            float v[2] = {1, 2};
            StWriteTensor t = {.name = "t", .dtype = DTYPE_F32, .ndim = 1, .shape = {2}, .data = v};
            switch (which) {
            case 0: rc = st_open(&f, path); if (rc == 0) st_close(&f); break;
            case 1: rc = st_open_header(&f, path); if (rc == 0) st_close(&f); break;
            case 2: rc = st_model_open(&m, dir, false); if (rc == 0) st_model_close(&m); break;
            default: rc = st_write(tmp_path("faults.safetensors"), &t, 1, NULL, NULL, 0); break;
            }
            bool reached = mem_alloc_count() >= k;
            mem_fail_at(0);
            if (!reached) { CHECK_MSG(rc == 0, "case %d: %s", which, error_message()); ok_runs++; break; }
            sites++;
            /* atomic_commit's directory fsync is best effort: its failed
             * allocation does not fail the write */
            if (which == 3 && rc == 0) { CHECK(st_open(&f, tmp_path("faults.safetensors")) == 0); st_close(&f); continue; }
            CHECK_MSG(rc == -1, "case %d: allocation %ld failed but the call succeeded", which, k);
            CHECK_ERROR_CONTAINS("out of memory");
        }
    }
    CHECK(ok_runs == 4);
    printf("allocation sites exercised: %d\n", sites);
}

/* Random corruption of a valid file (byte flips, truncation, appended
 * bytes, a rewritten header length): never a crash or sanitizer report;
 * every rejection is one line naming the file, every acceptance is a file
 * whose tensors lie inside it. */
static void test_mutations(void) {
    const char *src = tmp_path("rt.safetensors");
    MappedFile orig;
    CHECK(file_map(&orig, src) == 0);
    size_t n = orig.size;
    unsigned char *buf = malloc(n + 16);
    const char *path = tmp_path("mut.safetensors");
    Rng rng;
    rng_seed(&rng, 1234);
    int accepted = 0, rejected = 0;
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(buf, orig.data, n);
        size_t len = n;
        int kind = (int)rng_below(&rng, 4);
        if (kind == 0) for (int k = 0, flips = 1 + (int)rng_below(&rng, 3); k < flips; k++) buf[rng_below(&rng, len)] ^= (unsigned char)(1u << rng_below(&rng, 8));
        else if (kind == 1) len = (size_t)rng_below(&rng, n);
        else if (kind == 2) { size_t extra = 1 + (size_t)rng_below(&rng, 16); for (size_t k = 0; k < extra; k++) buf[len++] = (unsigned char)rng_next(&rng); }
        else { uint64_t v = rng_next(&rng) >> rng_below(&rng, 64); memcpy(buf, &v, 8); }
        write_raw(path, buf, len);
        StFile f;
        for (int header_only = 0; header_only < 2; header_only++) {
            int rc = header_only ? st_open_header(&f, path) : st_open(&f, path);
            if (rc == 0) {
                accepted++;
                for (size_t i = 0; i < f.n_tensors; i++) {
                    CHECK(f.tensors[i].end <= len - 8 - f.header_len);
                    if (!header_only) CHECK(st_tensor_count_nonfinite(&f.tensors[i]) <= f.tensors[i].nelem);
                }
                st_close(&f);
            } else {
                rejected++;
                CHECK(strstr(error_message(), path) == error_message());
                bool printable = true;
                for (const char *p = error_message(); *p; p++) printable &= (unsigned char)*p >= 0x20;
                CHECK_MSG(printable, "%s", error_message());
            }
        }
    }
    printf("mutations: %d accepted, %d rejected\n", accepted, rejected);
    CHECK(rejected > 0);
    free(buf);
    file_unmap(&orig);
    /* a name with a newline: the message stays on one line */
    expect_reject(make_st("nl.st", "{\"a\\nb\":{\"dtype\":\"F31\",\"shape\":[],\"data_offsets\":[0,4]}}", zeros, 4), "tensor \"a?b\": unknown dtype");
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lt_st_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 2; }
    test_header_length();
    test_header_text();
    test_offsets();
    test_accepted();
    test_nonfinite();
    test_writer();
    test_sharded();
    test_mutations();
    test_alloc_failures();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_finish("formats/safetensors");
}
