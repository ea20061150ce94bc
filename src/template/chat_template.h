/* chat_template.h: renders Hugging Face `chat_template` strings, the Jinja
 * subset that real tokenizer_config.json files use, with values modelled as
 * jansson json_t (null, bool, int, real, string, array, object) plus
 * internal macros. Whitespace follows transformers' settings (trim_blocks,
 * lstrip_blocks) and @huggingface/jinja's behaviour, which the tests compare
 * against byte for byte. Rendering is bounded (recursion depth, loop
 * iterations, bytes of strings built, output size) so an untrusted template
 * cannot hang or exhaust memory.
 *
 * Where @huggingface/jinja departs from Python Jinja2 (which transformers and
 * so mlx-lm use) in ways real templates can reach, this follows Python:
 * strip/lstrip/rstrip/trim take a `chars` argument; looping over an
 * undefined value renders nothing instead of failing; `undefined|length` is
 * 0; `~` with none gives "None"; 'ab' * 3 and string < string work;
 * length counts code points; a JSON real that is integral prints as 1.0.
 * Elsewhere it follows the reference: `{{ none }}` prints nothing, booleans
 * print as true/false, lists and dicts print as JSON. */
#ifndef LT_CHAT_TEMPLATE_H
#define LT_CHAT_TEMPLATE_H
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct ChatTemplate ChatTemplate;

/* Limits of one render (and of parsing: nesting depth). */
#define CHAT_TEMPLATE_MAX_DEPTH 200            /* nested blocks/expressions and macro calls */
#define CHAT_TEMPLATE_MAX_ITERATIONS 1000000L  /* loop iterations and range() items, whole render */
#define CHAT_TEMPLATE_MAX_OUTPUT (64u << 20)   /* bytes of output and of any one string */
#define CHAT_TEMPLATE_MAX_WORK (256ul << 20)   /* bytes of strings built, whole render */

/* Compiles a template; `name` (e.g. "DIR/tokenizer_config.json: chat_template")
 * is used in errors. An unsupported construct is an error naming it and its
 * line:column. -1 + error on failure. */
int chat_template_compile(ChatTemplate **out, const char *source, const char *name);
void chat_template_free(ChatTemplate *t);

/* Renders with the given context object (keys: messages, tools,
 * add_generation_prompt, bos_token, eos_token, and anything else).
 * raise_exception(msg) in the template becomes an error containing msg.
 * Output is heap (mem_free), NUL-terminated; out_len may be NULL. */
int chat_template_render(const ChatTemplate *t, json_t *context, char **out, size_t *out_len);
/* A compiled template is read-only while rendering, so several threads may
 * render it at once, each with its own context (contexts must not share
 * jansson values between threads: their reference counts are not atomic
 * under every build of jansson). */

/* Convenience: messages (array of {role, content, ...}), tools (array or NULL);
 * bos/eos may be NULL (then left undefined). */
int chat_template_apply(const ChatTemplate *t, json_t *messages, json_t *tools, bool add_generation_prompt,
                        const char *bos_token, const char *eos_token, char **out, size_t *out_len);
#endif
