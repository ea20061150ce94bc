/* tok_gguf.h: a tokenizer as llama.cpp's converter (convert_hf_to_gguf.py)
 * writes it into a GGUF file's metadata, so that llama.cpp tokenizes
 * exactly as lmtune does:
 *   byte-level BPE  -> tokenizer.ggml.model "gpt2": tokens, token types,
 *                      merges ("left right" by rank), and the name llama.cpp
 *                      gives to the tokenizer's pre-tokenizer regexes
 *                      (tokenizer.ggml.pre: gpt-2, llama-bpe, qwen2, smollm...)
 *   sentencepiece-style BPE with byte fallback (Llama 2, Mistral)
 *                   -> tokenizer.ggml.model "llama": tokens, scores, types;
 *                      llama.cpp's SPM merges the adjacent pair whose result
 *                      scores highest, so a token's score is minus the rank
 *                      of the first merge that makes it
 * plus BOS/EOS/padding/unknown ids, add-BOS/add-EOS and the chat template.
 * A tokenizer llama.cpp would tokenize differently (a pre-tokenizer it does
 * not know, another normalizer) is an error naming what differs. */
#ifndef LT_TOK_GGUF_H
#define LT_TOK_GGUF_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

/* llama.cpp's llama_token_type */
enum { GGUF_TOKEN_NORMAL = 1, GGUF_TOKEN_UNKNOWN = 2, GGUF_TOKEN_CONTROL = 3, GGUF_TOKEN_USER_DEFINED = 4,
       GGUF_TOKEN_UNUSED = 5, GGUF_TOKEN_BYTE = 6 };

typedef struct {
    const char *model;          /* "gpt2" or "llama" */
    const char *pre;            /* tokenizer.ggml.pre */
    int32_t n;                  /* tokens written: the model's vocab size */
    char **tokens;              /* (n) heap strings */
    float *scores;              /* (n), "llama" only, else NULL */
    int32_t *types;             /* (n) GGUF_TOKEN_* */
    char **merges;              /* "gpt2": "left right" in rank order */
    size_t n_merges;
    int32_t bos, eos, pad, unk; /* -1 when none */
    bool add_bos, add_eos;
    bool add_space_prefix;      /* "llama": a space before the text (HF's Prepend "▁") */
    const char *chat_template;  /* borrowed from the tokenizer; NULL when none */
} TokGgufMeta;

/* Fills m for a model whose embedding has vocab_size rows (ids the
 * tokenizer does not use become "[PAD<id>]", unused). eos_fallback (or -1)
 * is used when the tokenizer names no EOS (config.json's eos_token_id). */
int tokenizer_gguf_meta(const Tokenizer *t, int32_t vocab_size, int32_t eos_fallback, TokGgufMeta *m);
void tokenizer_gguf_meta_free(TokGgufMeta *m);

/* The other way: the tokenizer a GGUF file's metadata describes, splitting
 * text as llama.cpp does with it (tok_gguf_read.c). Errors name the file
 * and the key. */
int tokenizer_load_gguf(Tokenizer **out, const GgufFile *g);
#endif
