/* tokenizer.h: the public face of the tokenizer layer. A Hugging Face
 * `tokenizer.json` (BPE model, byte-level or sentencepiece-style with byte
 * fallback) plus `tokenizer_config.json`, encoding and decoding to the same
 * ids as the reference implementation (transformers.js / HF tokenizers).
 *
 * Pipeline of one encode (each stage lives in its own file):
 *   raw UTF-8 -> added tokens split out (tok_added.c)
 *             -> normalizer on each gap (tok_normalizer.c)
 *             -> pre-tokenizer (tok_pretokenizer.c)
 *             -> BPE model per pre-token, cached (tok_bpe.c)
 *             -> post-processor when add_special (tok_postprocess.c)
 * Decoding runs the decoder chain (tok_decoder.c). Loading: tok_load.c.
 *
 * A loaded Tokenizer is read-only except for an internal, mutex-guarded
 * BPE cache, so encode/decode may be called from several threads at once.
 *
 * Supported: model BPE (merges as "a b" or ["a","b"], ignore_merges,
 * byte_fallback, unk_token); normalizers Sequence, Prepend, Replace, NFC;
 * pre-tokenizers Sequence, Split, ByteLevel, Metaspace, Digits; post-
 * processors TemplateProcessing (single), ByteLevel, Sequence; decoders
 * ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence.
 * Anything else is a load error naming the field.
 * Where transformers.js and HF tokenizers differ we follow transformers.js
 * (added tokens matched on the raw text whatever their `normalized` flag;
 * single_word ignored; an inverted Split keeps the matches), except
 * Metaspace, which follows HF (prepend_scheme, split). NFC uses Unicode 14
 * tables; regex letters/digits follow Node's Unicode 17. decode does not
 * apply clean_up_tokenization_spaces. */
#ifndef LT_TOKENIZER_H
#define LT_TOKENIZER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct Tokenizer Tokenizer;

/* Loads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json
 * (bos/eos/pad token strings, chat_template, add_bos_token...); a config
 * without chat_template takes DIR/chat_template.jinja or
 * DIR/chat_template.json when present. Errors name the file and the field. */
int tokenizer_load(Tokenizer **out, const char *model_dir);
int tokenizer_load_files(Tokenizer **out, const char *tokenizer_json,
                         const char *tokenizer_config_json /* or NULL */);
void tokenizer_free(Tokenizer *t);

/* Encodes UTF-8 text (len bytes; invalid UTF-8 is an error naming the byte
 * offset). add_special: apply the post-processor (BOS/EOS templates).
 * *ids is heap (mem_free). */
int tokenizer_encode(const Tokenizer *t, const char *text, size_t len, bool add_special,
                     int32_t **ids, size_t *n_ids);
/* Decodes ids to UTF-8 (byte-level and byte-fallback pieces reassembled,
 * invalid byte sequences become U+FFFD as a WHATWG TextDecoder does;
 * skip_special drops special tokens). An id >= vocab is an error. *out is
 * heap (mem_free) and NUL-terminated. */
int tokenizer_decode(const Tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                     char **out, size_t *out_len);

int tokenizer_vocab_size(const Tokenizer *t);      /* max id + 1 incl. added tokens */
int32_t tokenizer_token_to_id(const Tokenizer *t, const char *token); /* -1 when absent */
const char *tokenizer_id_to_token(const Tokenizer *t, int32_t id);    /* NULL when out of range */
int32_t tokenizer_bos_id(const Tokenizer *t);      /* -1 when none */
int32_t tokenizer_eos_id(const Tokenizer *t);      /* -1 when none */
int32_t tokenizer_pad_id(const Tokenizer *t);      /* pad_token, else eos; -1 when none */
const char *tokenizer_bos_token(const Tokenizer *t); /* NULL when none */
const char *tokenizer_eos_token(const Tokenizer *t);
const char *tokenizer_pad_token(const Tokenizer *t);
/* add_bos_token / add_eos_token of tokenizer_config.json (false when absent). */
bool tokenizer_add_bos_token(const Tokenizer *t);
bool tokenizer_add_eos_token(const Tokenizer *t);
/* NULL when none; from tokenizer_config.json (a string, or the "default"
 * entry of a list of {name, template}). */
const char *tokenizer_chat_template(const Tokenizer *t);
/* Special added tokens and tokenizer_config's additional_special_tokens. */
bool tokenizer_is_special(const Tokenizer *t, int32_t id);
/* MLX-LM's TokenizerWrapper.has_thinking: the vocabulary has a thinking pair
 * (<think> </think>, <longcat_think> </longcat_think>, <|channel> <channel|>);
 * MLX-LM renders every chat template with enable_thinking set to it. */
bool tokenizer_has_thinking(const Tokenizer *t);

/* Demo generator: learns byte-level BPE merges from train_text (greedy BPE,
 * GPT-2 regex pre-tokenization; 256 byte tokens + merges + the special tokens
 * <|endoftext|>, <|im_start|>, <|im_end|>) until vocab_size tokens, and writes
 * OUT_DIR/tokenizer.json and OUT_DIR/tokenizer_config.json atomically
 * (eos_token <|im_end|>, pad <|endoftext|>, bos null, the chat_template given). */
int tokenizer_write_bytelevel(const char *out_dir, const char *train_text, size_t len,
                              int vocab_size, const char *chat_template /* or NULL */);
#endif
