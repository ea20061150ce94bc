/* dataset.h: MLX-LM's JSONL data sets (text, completions, chat), tokenized
 * once into one compact id array, with the prompt offset of each example
 * for --mask-prompt. Formats and messages as in MLX-LM's tuner/datasets.py. */
#ifndef LT_DATASET_H
#define LT_DATASET_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tokenizer/tokenizer.h"

typedef enum { DATA_TEXT, DATA_COMPLETIONS, DATA_CHAT } DataFormat;

typedef struct {
    const char *prompt_feature;      /* "prompt" */
    const char *completion_feature;  /* "completion" */
    const char *chat_feature;        /* "messages" */
    const char *text_feature;        /* "text" */
    bool mask_prompt;
    bool skip_bad_lines;             /* false (strict): the first bad line is an error */
    const char *chat_template;       /* override (--chat-template), or NULL: the tokenizer's */
    int32_t eos_fallback;            /* EOS for text data when the tokenizer names none (config.json's
                                        eos_token_id); -1: none */
    size_t max_line_bytes;           /* longest accepted JSONL line; 0 = 64 MiB (jsonl.h) */
} DatasetOptions;
void dataset_options_default(DatasetOptions *o);

typedef struct {
    char *path;
    DataFormat format;
    int32_t *tokens;     /* all examples' ids, concatenated */
    size_t *starts;      /* (n + 1): example i is tokens[starts[i] .. starts[i+1]) */
    int32_t *offsets;    /* (n): prompt offset (0 without --mask-prompt) */
    size_t n;            /* examples */
    size_t n_tokens;
    size_t bad_lines;    /* skipped (only with skip_bad_lines) */
    size_t blank_lines;  /* blank or whitespace-only lines, always skipped */
} Dataset;

/* Reads and tokenizes PATH. Errors name the file and line:
 * "data/train.jsonl:17: not a JSON object". A missing file is an error the
 * caller turns into MLX-LM's message (see dataset_load_split). */
int dataset_load(Dataset *d, const char *path, const Tokenizer *tok, const DatasetOptions *o);
/* With skip_bad_lines, bad lines are counted in d->bad_lines and summarized on
 * stderr: "[WARNING] PATH: skipped N bad lines (first: PATH:3: ...)". */
const char *dataset_format_name(DataFormat f); /* "text", "completions", "chat" */
/* DIR/{name}.jsonl, with MLX-LM's messages: a missing or empty train set is
 * an error ("Training set not found or empty. Must provide training set for
 * fine-tuning."); valid: *present = false and a warning is printed; test: error. */
int dataset_load_split(Dataset *d, const char *dir, const char *name, const Tokenizer *tok,
                       const DatasetOptions *o, bool *present);
void dataset_free(Dataset *d);
static inline size_t dataset_len(const Dataset *d, size_t i) { return d->starts[i + 1] - d->starts[i]; }
/* Examples whose loss targets all fall past max_seq_length (the prompt
 * offset of --mask-prompt is at least the truncated length), so they add
 * nothing to the loss; 0 without offsets. */
size_t dataset_count_no_targets(const Dataset *d, int max_seq_length);
/* The warning of the split at `path` when it has such examples (stdout). */
void dataset_warn_no_targets(const Dataset *d, int max_seq_length);
/* Bytes the data set holds (for the memory plan). */
size_t dataset_bytes(const Dataset *d);
/* FNV-1a hash of the ids, example bounds and offsets: a checkpoint stores it
 * so that a resume on different data (or another tokenizer) is refused. */
uint64_t dataset_fingerprint(const Dataset *d);
#endif
