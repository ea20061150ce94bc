/* fuzz_chat_template.c: libFuzzer target for the chat-template compiler and
 * renderer: any input compiles or is refused with a message naming it; a
 * compiled template renders a fixed conversation (with tools) within the
 * renderer's limits (depth, iterations, output size) or fails cleanly.
 * Build and run: make fuzz. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "base/alloc.h"
#include "base/error.h"
#include "template/chat_template.h"

static json_t *messages, *tools;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    setenv("LMTUNE_CHAT_DATE", "26 Jul 2024", 1);
    messages = json_loads("[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                          "{\"role\":\"user\",\"content\":\"Hi <b>there</b>\"},"
                          "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"type\":\"function\","
                          "\"function\":{\"name\":\"f\",\"arguments\":{\"x\":1,\"y\":[1,2.5,null,true]}}}]},"
                          "{\"role\":\"tool\",\"content\":\"42\"},"
                          "{\"role\":\"assistant\",\"content\":\"Done.\"}]", 0, NULL);
    tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"d\","
                       "\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}}}}]", 0, NULL);
    if (!messages || !tools) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *src = malloc(size + 1);
    memcpy(src, data, size);
    src[size] = 0;
    ChatTemplate *t = NULL;
    if (chat_template_compile(&t, src, "fuzz.jinja") == 0) {
        for (int variant = 0; variant < 2; variant++) {
            char *out = NULL;
            size_t len = 0;
            if (chat_template_apply(t, messages, variant ? tools : NULL, variant == 1, "<s>", "</s>", &out, &len) == 0) {
                if (strlen(out) > len || len > CHAT_TEMPLATE_MAX_OUTPUT) abort();
                mem_free(out);
            }
        }
        chat_template_free(t);
    } else if (!strstr(error_message(), "fuzz.jinja")) {
        abort();
    }
    free(src);
    return 0;
}
