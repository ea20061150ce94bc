/* tokenizer.h: Hugging Face tokenizer.json (byte-level and sentencepiece-style BPE). */
#ifndef LT_TOKENIZER_H
#define LT_TOKENIZER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
typedef struct Tokenizer Tokenizer;
int tokenizer_load(Tokenizer **out, const char *model_dir);
int tokenizer_load_files(Tokenizer **out, const char *tokenizer_json, const char *tokenizer_config_json);
void tokenizer_free(Tokenizer *t);
int tokenizer_encode(const Tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids, size_t *n_ids);
int tokenizer_decode(const Tokenizer *t, const int32_t *ids, size_t n, bool skip_special, char **out, size_t *out_len);
int tokenizer_vocab_size(const Tokenizer *t);
int32_t tokenizer_token_to_id(const Tokenizer *t, const char *token);
const char *tokenizer_id_to_token(const Tokenizer *t, int32_t id);
int32_t tokenizer_bos_id(const Tokenizer *t);
int32_t tokenizer_eos_id(const Tokenizer *t);
const char *tokenizer_bos_token(const Tokenizer *t);
const char *tokenizer_eos_token(const Tokenizer *t);
const char *tokenizer_chat_template(const Tokenizer *t);
bool tokenizer_is_special(const Tokenizer *t, int32_t id);
int tokenizer_write_bytelevel(const char *out_dir, const char *train_text, size_t len, int vocab_size, const char *chat_template);
#endif
