/* args.h: flag parsing for every command, table-driven. A command describes
 * its flags in an ArgSpec table (name, type, where the value goes in its
 * options struct, default and help text); args_parse reads
 * `--flag value`, `--flag=value`, store-true booleans and, when the table
 * allows it, a YAML file (-c/--config) whose keys are the flags' names with
 * underscores. Precedence: command line > YAML > defaults (the defaults are
 * whatever the options struct holds before the call). Numbers and sizes are
 * checked against the spec's range; a repeatable flag collects its values
 * in an ArgStringList. Every unknown flag or bad value is one error naming
 * the flag and the value.
 * The flag tables live with their commands (cli/train_args.h for train
 * and plan). */
#ifndef LT_ARGS_H
#define LT_ARGS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    ARG_STRING,     /* const char * */
    ARG_INT,        /* int, in the spec's range */
    ARG_U64,        /* uint64_t */
    ARG_DOUBLE,     /* double, in the spec's range */
    ARG_BOOL,       /* bool: store-true on the command line, true/false in YAML */
    ARG_CHOICE,     /* const char *, one of `choices` ("lora|dora|full") */
    ARG_SIZE,       /* size_t from "8GB", "7.5GiB", ..., in the spec's range */
    ARG_INT_OR_AUTO,/* int, in the spec's range, or "auto" stored as 0 */
    ARG_STRING_LIST /* ArgStringList: repeatable, each use appends a value (YAML: a list) */
} ArgType;

#define ARG_NO_MIN (-1e300)
#define ARG_NO_MAX 1e300
/* open_ends: the bound itself is refused ((0, 1] is min 0, max 1, ARG_OPEN_MIN). */
enum { ARG_OPEN_MIN = 1, ARG_OPEN_MAX = 2 };
/* The last four fields of a spec (min, range_text, max, open_ends) in the
 * common cases: no range (strings, booleans, ...), or a minimum only. */
#define ARG_UNBOUNDED ARG_NO_MIN, NULL, ARG_NO_MAX, 0
#define ARG_AT_LEAST(min, text) (min), (text), ARG_NO_MAX, 0

#define ARG_LIST_MAX 16
typedef struct {
    const char *items[ARG_LIST_MAX];
    int count;
} ArgStringList;

typedef struct {
    const char *name;       /* long name without dashes: "batch-size" (YAML: batch_size) */
    char short_name;        /* 'c', or 0 */
    ArgType type;
    size_t offset;          /* offsetof(options struct, field) */
    const char *metavar;    /* "N", "FILE", ... for --help */
    const char *help;
    const char *choices;    /* ARG_CHOICE: "a|b|c" */
    double min;             /* ARG_INT / ARG_DOUBLE / ARG_SIZE / ARG_INT_OR_AUTO: smallest value accepted */
    const char *range_text; /* how the range reads in errors: "a positive integer", "a number in (0, 1]" */
    double max;             /* largest value accepted; ARG_NO_MAX: none */
    unsigned open_ends;     /* ARG_OPEN_MIN | ARG_OPEN_MAX, or 0: both bounds accepted */
} ArgSpec;

/* A YAML key that is not a flag (nested sections such as lora_parameters):
 * returns 1 when handled, 0 when unknown, -1 on error. */
struct yaml_document_s;
struct yaml_node_s;
typedef int (*ArgYamlHook)(void *opts, const char *file, const char *key,
                           struct yaml_document_s *doc, struct yaml_node_s *value);

typedef struct {
    const char *command;            /* "train" */
    const char *usage;              /* one line after "usage: lmtune " */
    const ArgSpec *specs;
    size_t n_specs;
    bool config_file;               /* accepts -c/--config FILE.yaml */
    ArgYamlHook yaml_hook;          /* may be NULL */
    const char *const *yaml_ignored;/* MLX keys accepted and ignored with a warning (NULL-terminated) */
    const char *epilog;             /* printed after the flags (may be NULL) */
} ArgTable;

#define ARG_MAX_SPECS 96
typedef struct {
    bool help;                      /* --help was given (and printed) */
    bool seen[ARG_MAX_SPECS];       /* set on the command line or in YAML */
    const char *config_path;        /* -c FILE, or NULL */
} ArgResult;

/* Parses argv[1..argc) (argv[0] is the command name). Returns 0, or -1 with
 * the error set. With --help, prints the help to stdout and sets r->help. */
int args_parse(const ArgTable *t, void *opts, int argc, char **argv, ArgResult *r);
void args_print_help(const ArgTable *t, const void *defaults, FILE *out);
/* The value of spec s in an options struct, as --help shows defaults ("8",
 * "on", "a, b", "" for an unset string). */
void args_value_text(const ArgSpec *s, const void *opts, char *buf, size_t cap);
/* Whether the flag `name` was given (on the command line or in YAML). */
bool args_was_set(const ArgTable *t, const ArgResult *r, const char *name);
/* Strings read from YAML live until this is called. */
void args_release(void);

/* Helpers for YAML hooks. */
const char *args_yaml_scalar(struct yaml_node_s *n);   /* NULL when not a scalar */
int args_parse_double(const char *where, const char *text, double *out);
int args_parse_int(const char *where, const char *text, int *out);
int args_parse_bool(const char *where, const char *text, bool *out);
bool args_yaml_is_null(struct yaml_node_s *n);   /* a missing value, `~` or `null` */
#endif
