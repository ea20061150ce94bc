/* tok_train.c: placeholder until the trainer lands. */
#include "tokenizer/tok_internal.h"
#include "base/error.h"
int tokenizer_write_bytelevel(const char *out_dir, const char *train_text, size_t len, int vocab_size, const char *chat_template) {
    (void)out_dir; (void)train_text; (void)len; (void)vocab_size; (void)chat_template;
    return error_set("tokenizer_write_bytelevel: not implemented");
}
