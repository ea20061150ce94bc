/* chat_template.h: the Jinja subset of Hugging Face chat templates. */
#ifndef LT_CHAT_TEMPLATE_H
#define LT_CHAT_TEMPLATE_H
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
typedef struct ChatTemplate ChatTemplate;
int chat_template_compile(ChatTemplate **out, const char *source, const char *name);
void chat_template_free(ChatTemplate *t);
int chat_template_render(const ChatTemplate *t, json_t *context, char **out, size_t *out_len);
int chat_template_apply(const ChatTemplate *t, json_t *messages, json_t *tools, bool add_generation_prompt,
                        const char *bos_token, const char *eos_token, char **out, size_t *out_len);
#endif
