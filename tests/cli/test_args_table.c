/* test_args_table.c: the generic parts of the table-driven flag parser
 * (cli/args.c) on a table of its own: ranges with a maximum and open ends
 * (ARG_INT, ARG_DOUBLE), sizes with a minimum (ARG_SIZE), repeatable flags
 * (ARG_STRING_LIST) on the command line and in YAML, and --help for them.
 * The CLI is not part of the library, so the parser's source is compiled
 * into this test (as tests/train/test_args.c does for train's table). */
#include "cli/args.c"
#include <unistd.h>
#include "check.h"
#include "yaml_file.h"

typedef struct {
    int vocab;
    double top_p, min_p;
    size_t shard;
    ArgStringList files;
    bool quiet;
    const char *config;
    ArgResult parsed;
} Opts;

#define OFF(f) offsetof(Opts, f)
static const ArgSpec SPECS[] = {
    {"vocab", 0, ARG_INT, OFF(vocab), "N", "vocabulary", NULL, 259, "an integer in 259..1000000", 1000000, 0},
    {"top-p", 0, ARG_DOUBLE, OFF(top_p), "P", "nucleus", NULL, 0, "a number in (0, 1]", 1, ARG_OPEN_MIN},
    {"min-p", 0, ARG_DOUBLE, OFF(min_p), "P", "min-p", NULL, 0, "a number in [0, 1)", 1, ARG_OPEN_MAX},
    {"shard", 0, ARG_SIZE, OFF(shard), "SIZE", "largest shard", NULL, ARG_AT_LEAST(1, "a positive size")},
    {"file", 'f', ARG_STRING_LIST, OFF(files), "FILE", "input file", NULL, ARG_UNBOUNDED},
    {"quiet", 0, ARG_BOOL, OFF(quiet), NULL, "say less", NULL, ARG_UNBOUNDED},
    {"config", 'c', ARG_STRING, OFF(config), "FILE.yaml", "YAML file", NULL, ARG_UNBOUNDED},
};
static const ArgTable TABLE = {"demo", "demo [flags]", SPECS, sizeof SPECS / sizeof SPECS[0], true, NULL, NULL, NULL};

/* Parses "demo LINE" (words split at spaces) over the defaults. */
static int parse(Opts *o, const char *line) {
    static char buf[4096];
    char *argv[64];
    int argc = 0;
    snprintf(buf, sizeof buf, "demo %s", line);
    for (char *tok = strtok(buf, " "); tok && argc < 63; tok = strtok(NULL, " ")) argv[argc++] = tok;
    argv[argc] = NULL;
    *o = (Opts){.vocab = 512, .top_p = 1.0, .min_p = 0.0, .shard = 5000000000ull};
    o->files.items[0] = "default.txt";
    o->files.count = 1;
    return args_parse(&TABLE, o, argc, argv, &o->parsed);
}

int main(void) {
    Opts o;
    CHECK(parse(&o, "") == 0 && o.vocab == 512 && o.top_p == 1.0 && o.files.count == 1);

    /* A closed range [259, 1000000]: both ends in, one past either end out. */
    CHECK(parse(&o, "--vocab 259") == 0 && o.vocab == 259);
    CHECK(parse(&o, "--vocab=1000000") == 0 && o.vocab == 1000000);
    CHECK(parse(&o, "--vocab 258") < 0);
    CHECK_ERROR_CONTAINS("--vocab: expected an integer in 259..1000000, got \"258\"");
    CHECK(parse(&o, "--vocab=1000001") < 0);
    CHECK_ERROR_CONTAINS("--vocab: expected an integer in 259..1000000, got \"1000001\"");
    CHECK(parse(&o, "--vocab 3e2") < 0);
    CHECK_ERROR_CONTAINS("--vocab: expected an integer in 259..1000000, got \"3e2\"");

    /* (0, 1]: the minimum itself is refused, the maximum accepted. */
    CHECK(parse(&o, "--top-p 1") == 0 && o.top_p == 1.0);
    CHECK(parse(&o, "--top-p 1e-300") == 0 && o.top_p == 1e-300);
    CHECK(parse(&o, "--top-p 0") < 0);
    CHECK_ERROR_CONTAINS("--top-p: expected a number in (0, 1], got \"0\"");
    CHECK(parse(&o, "--top-p=1.0000001") < 0);
    CHECK_ERROR_CONTAINS("--top-p: expected a number in (0, 1], got \"1.0000001\"");
    CHECK(parse(&o, "--top-p nan") < 0);
    CHECK_ERROR_CONTAINS("--top-p: expected a number in (0, 1], got \"nan\"");

    /* [0, 1): the maximum itself is refused, the minimum accepted. */
    CHECK(parse(&o, "--min-p 0") == 0 && o.min_p == 0.0);
    CHECK(parse(&o, "--min-p 0.999") == 0 && o.min_p == 0.999);
    CHECK(parse(&o, "--min-p 1") < 0);
    CHECK_ERROR_CONTAINS("--min-p: expected a number in [0, 1), got \"1\"");
    CHECK(parse(&o, "--min-p -0.1") < 0);
    CHECK_ERROR_CONTAINS("--min-p: expected a number in [0, 1), got \"-0.1\"");

    /* A size with a minimum: 0 and garbage refused with the range's text. */
    CHECK(parse(&o, "--shard 100KB") == 0 && o.shard == 100000);
    CHECK(parse(&o, "--shard=2GiB") == 0 && o.shard == 2147483648ull);
    CHECK(parse(&o, "--shard 0") < 0);
    CHECK_ERROR_CONTAINS("--shard: expected a positive size, got \"0\"");
    CHECK(parse(&o, "--shard lots") < 0);
    CHECK_ERROR_CONTAINS("--shard: expected a positive size, got \"lots\"");

    /* A repeatable flag: the command line's values, in order, replace the
     * default; both spellings and the short name. */
    CHECK(parse(&o, "--file a --quiet --file=b -f c") == 0 && o.quiet);
    CHECK(o.files.count == 3 && !strcmp(o.files.items[0], "a") && !strcmp(o.files.items[1], "b") && !strcmp(o.files.items[2], "c"));
    CHECK(args_was_set(&TABLE, &o.parsed, "file") && !args_was_set(&TABLE, &o.parsed, "vocab"));
    char line[1024] = "";
    for (int i = 0; i < ARG_LIST_MAX; i++) snprintf(line + strlen(line), sizeof line - strlen(line), "--file f%d ", i);
    CHECK(parse(&o, line) == 0 && o.files.count == ARG_LIST_MAX && !strcmp(o.files.items[ARG_LIST_MAX - 1], "f15"));
    snprintf(line + strlen(line), sizeof line - strlen(line), "--file one-too-many");
    CHECK(parse(&o, line) < 0);
    CHECK_ERROR_CONTAINS("--file: at most 16 values, got another: \"one-too-many\"");
    CHECK(parse(&o, "--file") < 0);
    CHECK_ERROR_CONTAINS("--file: expected a value");

    /* In YAML: a list or one value, replacing the default; the command line
     * replaces YAML's values. */
    const char *y = write_yaml("file: [x.txt, y.txt]\nvocab: 300\n");
    snprintf(line, sizeof line, "-c %s", y);
    CHECK(parse(&o, line) == 0 && o.vocab == 300 && o.files.count == 2);
    CHECK(!strcmp(o.files.items[0], "x.txt") && !strcmp(o.files.items[1], "y.txt"));
    snprintf(line, sizeof line, "-c %s --file z.txt", y);
    CHECK(parse(&o, line) == 0 && o.files.count == 1 && !strcmp(o.files.items[0], "z.txt"));
    args_release();
    y = write_yaml("file: only.txt\n");
    snprintf(line, sizeof line, "--config=%s", y);
    CHECK(parse(&o, line) == 0 && o.files.count == 1 && !strcmp(o.files.items[0], "only.txt"));
    args_release();
    y = write_yaml("file: {a: 1}\n");
    CHECK(parse(&o, line) < 0);
    CHECK_ERROR_CONTAINS(": file: expected a value or a list of values");
    y = write_yaml("vocab: 100\n");
    CHECK(parse(&o, line) < 0);
    CHECK_ERROR_CONTAINS(": vocab: expected an integer in 259..1000000, got \"100\"");
    args_release();
    unlink(y);

    /* --help: the repeatable flag says so, with its default values. */
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    parse(&o, "");
    o.files.items[1] = "more.txt";
    o.files.count = 2;
    args_print_help(&TABLE, &o, mem);
    fclose(mem);
    CHECK(strstr(buf, "-f, --file FILE") && strstr(buf, "(repeatable, up to 16 times) [default: default.txt, more.txt]"));
    CHECK(strstr(buf, "--vocab N") && strstr(buf, "[default: 512]") && strstr(buf, "[default: 5000000000 bytes]"));
    free(buf);
    return check_finish("cli/args_table");
}
