/* test_gguf.c: the GGUF reader and writer.
 *   - Every bad input of the checklist (shared/reference/bad-inputs.md, in
 *     GGUF's terms, and ggml's gguf.cpp checks): short files, bad magic and
 *     versions, counts and lengths that would size allocations past the
 *     file, empty and duplicate keys, invalid and nested value types, bad
 *     alignment, dimensions (0, 5, negative, overflowing), unknown and
 *     unsupported tensor types, rows that do not fill whole blocks, names
 *     too long or holding a newline, offsets out of order / misaligned /
 *     overlapping / past the end, trailing bytes: each refused with one
 *     line naming the file. LMTUNE_SEED_CORPUS=DIR writes them as fuzzer
 *     seeds.
 *   - A written file read back: every value type, arrays, tensors of each
 *     type at aligned offsets.
 *   - A model's metadata read back as its config (gguf_model_config), for
 *     llama with llama3 RoPE scaling (RoPE tables from rope_freqs equal the
 *     llama3 tables), qwen2 and qwen3; and gguf_check_model_tensors'
 *     errors. */
#include "check.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "formats/gguf.h"
#include "formats/gguf_arch.h"
#include "kernels/ops.h"
#include <stdlib.h>
#include <unistd.h>

typedef struct {
    uint8_t b[4096];
    size_t n;
} Buf;

static void put(Buf *f, const void *p, size_t n) {
    memcpy(f->b + f->n, p, n);
    f->n += n;
}
static void u32(Buf *f, uint32_t v) { put(f, &v, 4); }
static void u64(Buf *f, uint64_t v) { put(f, &v, 8); }
static void str(Buf *f, const char *s) {
    u64(f, strlen(s));
    put(f, s, strlen(s));
}
static void pad(Buf *f) {
    while (f->n % 32) f->b[f->n++] = 0;
}

/* A valid file: 2 key-values, 2 F32 tensors of 8 and 4 elements. Options
 * change one thing. */
typedef struct {
    uint32_t version;
    int64_t n_kv, n_t;
    const char *key0;
    uint32_t kv_type;
    uint64_t str_len;       /* 0: the real length */
    uint32_t dims;
    int64_t ne0, ne1;
    uint32_t ttype;
    uint64_t off1;          /* offset of the second tensor */
    const char *tname1;
    int trailing;
    int cut;                /* bytes cut from the end */
    bool align_kv;          /* general.alignment UINT32 = 48 */
} Opt;

static size_t build(Buf *f, Opt o) {
    f->n = 0;
    put(f, "GGUF", 4);
    u32(f, o.version ? o.version : 3);
    u64(f, (uint64_t)(o.n_t ? o.n_t : 2));
    u64(f, (uint64_t)(o.n_kv ? o.n_kv : 2));
    str(f, o.key0 ? o.key0 : "general.architecture");
    u32(f, o.kv_type ? o.kv_type : GGUF_TYPE_STRING);
    if (o.kv_type == GGUF_TYPE_ARRAY) {
        u32(f, GGUF_TYPE_ARRAY);
        u64(f, 1);
    } else if (o.str_len) {
        u64(f, o.str_len);
        put(f, "llama", 5);
    } else {
        str(f, "llama");
    }
    if (o.align_kv) {
        str(f, "general.alignment");
        u32(f, GGUF_TYPE_UINT32);
        u32(f, 48);
    } else {
        str(f, "x.count");
        u32(f, GGUF_TYPE_UINT32);
        u32(f, 7);
    }
    str(f, "t0");
    u32(f, o.dims ? o.dims : 1);
    u64(f, (uint64_t)(o.ne0 ? o.ne0 : 8));
    for (uint32_t d = 1; d < o.dims && d < 8; d++) u64(f, d == 1 && o.ne1 ? (uint64_t)o.ne1 : 1);
    u32(f, o.ttype);
    u64(f, 0);
    str(f, o.tname1 ? o.tname1 : "t1");
    u32(f, 1);
    u64(f, 4);
    u32(f, GGML_TYPE_F32);
    u64(f, o.off1 ? o.off1 : 32);
    pad(f);
    for (int i = 0; i < 64; i++) f->b[f->n++] = (uint8_t)i;   /* 32 bytes of t0 + 16 of t1 + padding */
    f->n += (size_t)o.trailing;
    f->n -= (size_t)o.cut;
    return f->n;
}

static char dir[128];
static int seed_no;

static void bad(const char *what, const Buf *f, const char *needle) {
    char path[256];
    snprintf(path, sizeof path, "%s/bad.gguf", dir);
    CHECK(atomic_write_file(path, f->b, f->n) == 0);
    GgufFile g;
    int rc = gguf_open(&g, path);
    CHECK_MSG(rc < 0, "%s: accepted", what);
    if (rc == 0) {
        gguf_close(&g);
        return;
    }
    const char *m = error_message();
    CHECK_MSG(strstr(m, path) && !strchr(m, '\n'), "%s: message \"%s\" does not name the file on one line", what, m);
    CHECK_MSG(strstr(m, needle), "%s: message \"%s\" lacks \"%s\"", what, m, needle);
    const char *corpus = getenv("LMTUNE_SEED_CORPUS");
    if (corpus) {
        char seed[512];
        snprintf(seed, sizeof seed, "%s/bad_%02d.gguf", corpus, seed_no++);
        if (atomic_write_file(seed, f->b, f->n) < 0) fprintf(stderr, "%s\n", error_message());
    }
}

static void bad_inputs(void) {
    Buf f;
    build(&f, (Opt){0});
    {
        char path[256];
        snprintf(path, sizeof path, "%s/good.gguf", dir);
        CHECK(atomic_write_file(path, f.b, f.n) == 0);
        GgufFile g;
        CHECK(gguf_open(&g, path) == 0);
        CHECK(g.n_tensors == 2 && g.n_kv == 2 && g.tensors[1].offset == 32 && g.tensors[1].bytes == 16);
        gguf_close(&g);
    }
    Buf e = {.n = 0};
    bad("empty file", &e, "truncated");
    for (size_t k = 1; k < 4; k++) {
        e.n = k;
        memcpy(e.b, "GGU", 3);
        bad("1-3 bytes", &e, "truncated");
    }
    build(&f, (Opt){0});
    f.b[0] = 'X';
    bad("bad magic", &f, "not a GGUF file");
    build(&f, (Opt){.version = 1});
    bad("version 1", &f, "version 1");
    build(&f, (Opt){.version = 0x03000000});
    bad("big-endian version", &f, "big-endian");
    build(&f, (Opt){.n_kv = 1000000});
    bad("kv count past the end", &f, "key-values cannot fit");
    build(&f, (Opt){.n_kv = -1});
    bad("negative kv count", &f, "key-values cannot fit");
    build(&f, (Opt){.n_t = (int64_t)1 << 62});
    bad("tensor count past the end", &f, "tensors cannot fit");
    build(&f, (Opt){.str_len = UINT64_MAX});
    bad("string length 2^64-1", &f, "runs past the end");
    build(&f, (Opt){.key0 = ""});
    bad("empty key", &f, "is empty");
    build(&f, (Opt){.key0 = "x.count"});
    bad("duplicate key", &f, "duplicate key");
    build(&f, (Opt){.kv_type = 13});
    bad("value type 13", &f, "value type 13");
    build(&f, (Opt){.kv_type = GGUF_TYPE_ARRAY});
    bad("nested arrays", &f, "nested arrays");
    build(&f, (Opt){.align_kv = true});
    bad("alignment 48", &f, "not a power of two");
    build(&f, (Opt){.dims = 5});
    bad("5 dimensions", &f, "5 dimensions");
    build(&f, (Opt){.ne0 = -8});
    bad("negative dimension", &f, "negative");
    build(&f, (Opt){.ne0 = INT64_MAX, .ne1 = 4, .dims = 2});
    bad("element count overflow", &f, "element count overflows");
    build(&f, (Opt){.ne0 = INT64_MAX / 2, .dims = 2});
    bad("byte size overflow", &f, "overflows");
    build(&f, (Opt){.ttype = 9});
    bad("Q8_1 tensor", &f, "not supported");
    build(&f, (Opt){.ttype = 99});
    bad("unknown ggml type", &f, "not supported");
    build(&f, (Opt){.ttype = GGML_TYPE_Q4_K});
    bad("rows not filling a block", &f, "not a multiple");
    build(&f, (Opt){.off1 = 16});
    bad("overlapping offsets", &f, "expected 32");
    build(&f, (Opt){.off1 = 64});
    bad("gap between tensors", &f, "expected 32");
    build(&f, (Opt){.off1 = 33});
    bad("misaligned offset", &f, "expected 32");
    build(&f, (Opt){.tname1 = "t0"});
    bad("duplicate tensor name", &f, "duplicate tensor name");
    build(&f, (Opt){.tname1 = "a\nb", .off1 = 16});
    bad("a bad tensor whose name holds a newline", &f, "tensor a?b");
    build(&f, (Opt){.tname1 = "a_name_that_is_far_too_long_for_ggml_which_allows_63_bytes_and_no_more"});
    bad("name of 70 bytes", &f, "at most 63");
    build(&f, (Opt){.trailing = 32});
    bad("trailing bytes", &f, "bytes after the tensor data");
    build(&f, (Opt){.cut = 17 + 16});
    bad("data past the end", &f, "runs past the end");
}

static void round_trip(void) {
    static const char *const strs[] = {"a", "", "\xE2\x96\x81x"};
    static const float fs[] = {1.5f, -2};
    static const int32_t is[] = {3, -4, 5};
    GgufKVOut kv[] = {
        {.key = "s", .type = GGUF_TYPE_STRING, .str = "hello"},
        {.key = "u", .type = GGUF_TYPE_UINT32, .u32 = 4000000000u},
        {.key = "i", .type = GGUF_TYPE_INT32, .i32 = -7},
        {.key = "f", .type = GGUF_TYPE_FLOAT32, .f32 = 0.25f},
        {.key = "b", .type = GGUF_TYPE_BOOL, .b = true},
        {.key = "as", .type = GGUF_TYPE_ARRAY, .arr_type = GGUF_TYPE_STRING, .n = 3, .strs = strs},
        {.key = "af", .type = GGUF_TYPE_ARRAY, .arr_type = GGUF_TYPE_FLOAT32, .n = 2, .f32s = fs},
        {.key = "ai", .type = GGUF_TYPE_ARRAY, .arr_type = GGUF_TYPE_INT32, .n = 3, .i32s = is},
    };
    static uint8_t q[2 * 144];
    static float x[5];
    for (int i = 0; i < 288; i++) q[i] = (uint8_t)(i * 7);
    GgufTensorOut ts[] = {{"x", 1, {5, 1, 1, 1}, GGML_TYPE_F32, x, NULL, NULL, 0},
                          {"q", 2, {256, 2, 1, 1}, GGML_TYPE_Q4_K, q, NULL, NULL, 0}};
    char path[256];
    snprintf(path, sizeof path, "%s/rt.gguf", dir);
    CHECK(gguf_write(path, kv, 8, ts, 2) == 0);
    GgufFile g;
    CHECK(gguf_open(&g, path) == 0);
    int64_t v;
    double d;
    bool b;
    char *s;
    CHECK(gguf_get_int(&g, "u", true, 0, INT64_MAX, &v) == 0 && v == 4000000000ll);
    CHECK(gguf_get_int(&g, "i", true, -10, 0, &v) == 0 && v == -7);
    CHECK(gguf_get_int(&g, "i", true, 0, 10, &v) < 0);
    CHECK_ERROR_CONTAINS("out of range");
    CHECK(gguf_get_f64(&g, "f", true, &d) == 0 && d == 0.25);
    CHECK(gguf_get_bool(&g, "b", true, &b) == 0 && b);
    CHECK(gguf_get_str(&g, "s", true, &s) == 0 && !strcmp(s, "hello"));
    mem_free(s);
    CHECK(gguf_get_str(&g, "u", true, &s) < 0);
    CHECK_ERROR_CONTAINS("must be a string");
    CHECK(gguf_get_int(&g, "missing", true, 0, 1, &v) < 0);
    CHECK_ERROR_CONTAINS("key missing is missing");
    v = 42;
    CHECK(gguf_get_int(&g, "missing", false, 0, 1, &v) == 0 && v == 42);
    const GgufKV *as = gguf_find_kv(&g, "as");
    CHECK(as && as->arr_n == 3 && as->arr_str[2].n == 4 && !memcmp(as->arr_str[2].p, "\xE2\x96\x81x", 4));
    CHECK(as && as->arr_str[1].n == 0);
    const GgufKV *af = gguf_find_kv(&g, "af");
    CHECK(af && gguf_arr_f64(af, 0) == 1.5 && gguf_arr_f64(af, 1) == -2);
    const GgufKV *ai = gguf_find_kv(&g, "ai");
    CHECK(ai && gguf_arr_i64(ai, 1) == -4);
    const GgufTensorInfo *tq = gguf_find_tensor(&g, "q");
    CHECK(tq && tq->type == GGML_TYPE_Q4_K && tq->bytes == 288 && tq->offset == 32 && !memcmp(tq->data, q, 288));
    CHECK(tq && tq->ne[0] == 256 && tq->ne[1] == 2 && tq->nelem == 512);
    gguf_close(&g);
}

/* Every key-value type, read and written back with GgufKVOut.from (what
 * fuse on a GGUF base does with the base's metadata): the file comes out
 * byte for byte the same. */
static void copy_every_type(void) {
    static const int scalars[] = {GGUF_TYPE_UINT8, GGUF_TYPE_INT8, GGUF_TYPE_UINT16, GGUF_TYPE_INT16,
                                  GGUF_TYPE_UINT32, GGUF_TYPE_INT32, GGUF_TYPE_FLOAT32, GGUF_TYPE_BOOL,
                                  GGUF_TYPE_UINT64, GGUF_TYPE_INT64, GGUF_TYPE_FLOAT64};
    enum { NS = sizeof scalars / sizeof scalars[0] };
    Buf f = {0};
    put(&f, "GGUF", 4);
    u32(&f, 3);
    u64(&f, 1);
    u64(&f, 2 * NS + 2);
    uint8_t val[9] = {0xEF, 0xCD, 0xAB, 0x89, 0x67, 0x45, 0x23, 0x81, 0x3C};   /* val + 1 is read too */
    char key[32];
    for (int i = 0; i < NS; i++) {
        size_t sz = gguf_scalar_size(scalars[i]);
        snprintf(key, sizeof key, "k.scalar%d", scalars[i]);
        str(&f, key);
        u32(&f, (uint32_t)scalars[i]);
        if (scalars[i] == GGUF_TYPE_BOOL) put(&f, "\1", 1);
        else put(&f, val, sz);
        snprintf(key, sizeof key, "k.array%d", scalars[i]);
        str(&f, key);
        u32(&f, GGUF_TYPE_ARRAY);
        u32(&f, (uint32_t)scalars[i]);
        u64(&f, 3);
        for (int k = 0; k < 3; k++) {
            if (scalars[i] == GGUF_TYPE_BOOL) put(&f, k == 1 ? "\1" : "\0", 1);
            else put(&f, val + k % 2, sz);
        }
    }
    str(&f, "k.string");
    u32(&f, GGUF_TYPE_STRING);
    str(&f, "a string");
    str(&f, "k.strings");
    u32(&f, GGUF_TYPE_ARRAY);
    u32(&f, GGUF_TYPE_STRING);
    u64(&f, 3);
    str(&f, "x");
    str(&f, "");
    str(&f, "\xE2\x96\x81y");
    str(&f, "t");
    u32(&f, 1);
    u64(&f, 8);
    u32(&f, GGML_TYPE_F32);
    u64(&f, 0);
    pad(&f);
    for (int i = 0; i < 32; i++) f.b[f.n++] = (uint8_t)(3 * i);
    char src[256], dst[256];
    snprintf(src, sizeof src, "%s/every_type.gguf", dir);
    snprintf(dst, sizeof dst, "%s/every_type_copy.gguf", dir);
    CHECK(atomic_write_file(src, f.b, f.n) == 0);
    GgufFile g;
    CHECK(gguf_open(&g, src) == 0);
    CHECK(g.n_kv == 2 * NS + 2);
    GgufKVOut kv[2 * NS + 2];
    for (size_t i = 0; i < g.n_kv; i++) kv[i] = (GgufKVOut){.from = &g.kv[i]};
    const GgufTensorInfo *t = &g.tensors[0];
    GgufTensorOut ts = {t->name, 1, {8, 1, 1, 1}, t->type, t->data, NULL, NULL, 0};
    CHECK(gguf_write(dst, kv, g.n_kv, &ts, 1) == 0);
    gguf_close(&g);
    char *out;
    size_t n;
    CHECK(file_read_all(dst, 0, &out, &n) == 0);
    CHECK_MSG(n == f.n && !memcmp(out, f.b, n), "the copy differs (%zu bytes, the source %zu)", n, f.n);
    mem_free(out);
}

static void model_config(void) {
    ModelConfig c;
    hf_config_init(&c, "llama");
    c.hidden_size = 64;
    c.intermediate_size = 96;
    c.num_hidden_layers = 1;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.vocab_size = 32;
    c.rms_norm_eps = 1e-5f;
    c.rope_theta = 500000;
    c.rope_scaling.type = ROPE_SCALING_LLAMA3;
    c.rope_scaling.factor = 8;
    c.rope_scaling.low_freq_factor = 1;
    c.rope_scaling.high_freq_factor = 4;
    c.rope_scaling.original_max_position = 16;
    /* what gguf_export writes for it: the llama3 factors as rope_freqs */
    float factors[8];
    for (int i = 0; i < 8; i++) {
        double inv = 1.0 / pow(c.rope_theta, 2.0 * i / 16);
        double wavelen = 2 * M_PI / (float)inv;
        double lo = 16.0 / 1;
        double hi = 16.0 / 4;
        if (wavelen < hi) factors[i] = 1;
        else if (wavelen > lo) factors[i] = 8;
        else factors[i] = (float)(1.0 / ((1 - (16 / wavelen - 1) / 3) / 8 + (16 / wavelen - 1) / 3));
    }
    GgufKVOut kv[] = {
        {.key = "general.architecture", .type = GGUF_TYPE_STRING, .str = "llama"},
        {.key = "llama.embedding_length", .type = GGUF_TYPE_UINT32, .u32 = 64},
        {.key = "llama.block_count", .type = GGUF_TYPE_UINT32, .u32 = 1},
        {.key = "llama.feed_forward_length", .type = GGUF_TYPE_UINT32, .u32 = 96},
        {.key = "llama.attention.head_count", .type = GGUF_TYPE_UINT32, .u32 = 4},
        {.key = "llama.attention.head_count_kv", .type = GGUF_TYPE_UINT32, .u32 = 2},
        {.key = "llama.attention.layer_norm_rms_epsilon", .type = GGUF_TYPE_FLOAT32, .f32 = 1e-5f},
        {.key = "llama.rope.freq_base", .type = GGUF_TYPE_FLOAT32, .f32 = 500000},
        {.key = "tokenizer.ggml.eos_token_id", .type = GGUF_TYPE_UINT32, .u32 = 3},
    };
    static float emb[32 * 64];
    GgufTensorOut ts[] = {{"token_embd.weight", 2, {64, 32, 1, 1}, GGML_TYPE_F32, emb, NULL, NULL, 0},
                          {"rope_freqs.weight", 1, {8, 1, 1, 1}, GGML_TYPE_F32, factors, NULL, NULL, 0}};
    char path[256];
    snprintf(path, sizeof path, "%s/cfg.gguf", dir);
    CHECK(gguf_write(path, kv, 9, ts, 2) == 0);
    GgufFile g;
    CHECK(gguf_open(&g, path) == 0);
    ModelConfig r;
    CHECK(gguf_model_config(&g, &r) == 0);
    CHECK(!strcmp(r.model_type, "llama") && r.hidden_size == 64 && r.head_dim == 16 && r.num_key_value_heads == 2);
    CHECK(r.vocab_size == 32 && r.tie_word_embeddings && !r.attention_bias && !r.qk_norm);
    CHECK(r.n_eos == 1 && r.eos_token_ids[0] == 3 && r.bos_token_id == -1 && r.max_position_embeddings == 2048);
    CHECK(r.rope_scaling.type == ROPE_SCALING_FACTORS && r.rope_scaling.n_factors == 8);
    /* RoPE tables from the factors equal the llama3 tables */
    float c1[40 * 8];
    float s1[40 * 8];
    float c2[40 * 8];
    float s2[40 * 8];
    rope_tables(c1, s1, 40, 16, c.rope_theta, &c.rope_scaling, false);
    rope_tables(c2, s2, 40, 16, r.rope_theta, &r.rope_scaling, false);
    double worst = 0;
    for (int i = 0; i < 40 * 8; i++) worst = fmax(worst, fmax(fabs(c1[i] - c2[i]), fabs(s1[i] - s2[i])));
    printf("worst RoPE table difference, rope_freqs vs llama3 parameters: %.3g\n", worst);
    CHECK(worst < 1e-5);
    /* the tensors of a one-block model: all but token_embd are missing */
    const GgufArch *a = gguf_arch_by_name("llama");
    CHECK(gguf_check_model_tensors(&g, a, &r) < 0);
    CHECK_ERROR_CONTAINS("blk.0.attn_norm.weight");
    gguf_close(&g);
    kv[0].str = "gpt5";
    CHECK(gguf_write(path, kv, 9, ts, 2) == 0);
    CHECK(gguf_open(&g, path) == 0);
    CHECK(gguf_model_config(&g, &r) < 0);
    CHECK_ERROR_CONTAINS("\"gpt5\" is not supported");
    gguf_close(&g);
    kv[0].str = "llama";
    kv[5].u32 = 3;
    CHECK(gguf_write(path, kv, 9, ts, 2) == 0);
    CHECK(gguf_open(&g, path) == 0);
    CHECK(gguf_model_config(&g, &r) < 0);
    CHECK_ERROR_CONTAINS("not a multiple of 3 KV heads");
    gguf_close(&g);
}

int main(void) {
    snprintf(dir, sizeof dir, "build/test_gguf.%d", (int)getpid());
    CHECK(dir_ensure(dir) == 0);
    bad_inputs();
    round_trip();
    copy_every_type();
    model_config();
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (check_failed == 0 && system(cmd) != 0) return 1;
    return check_finish("formats/gguf");
}
