/* tiny_tokenizer.h: writes a small byte-level BPE tokenizer (tokenizer.json
 * and tokenizer_config.json) for the data tests and the JSONL fuzz target. */
#ifndef LT_TEST_TINY_TOKENIZER_H
#define LT_TEST_TINY_TOKENIZER_H
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A small byte-level BPE tokenizer.json written by hand (the 256 GPT-2 byte
 * symbols, a few merges, three special tokens), so these tests depend only
 * on the tokenizer's loader, not on its trainer. */
static inline int write_tokenizer(const char *dir, const char *chat_template) {
    char path[256];
    snprintf(path, sizeof path, "mkdir -p '%s'", dir);
    if (system(path) != 0) return -1;
    int byte_to_cp[256], n_extra = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        byte_to_cp[b] = printable ? b : 256 + n_extra++;
    }
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char sym[8];
        int cp = byte_to_cp[b];
        if (cp < 0x80) { sym[0] = (char)cp; sym[1] = 0; }
        else { sym[0] = (char)(0xC0 | (cp >> 6)); sym[1] = (char)(0x80 | (cp & 0x3F)); sym[2] = 0; }
        json_object_set_new(vocab, sym, json_integer(b));
    }
    /* "\xC4\xA0" is U+0120, the byte-level symbol of a space. */
    const char *merges[][3] = {{"t", "h", "th"}, {"th", "e", "the"}, {"\xC4\xA0", "t", "\xC4\xA0t"},
                               {"e", "r", "er"}, {"o", "n", "on"}, {"i", "n", "in"}};
    json_t *merge_list = json_array();
    for (int m = 0; m < 6; m++) {
        char pair[20];
        snprintf(pair, sizeof pair, "%s %s", merges[m][0], merges[m][1]);
        json_array_append_new(merge_list, json_string(pair));
        json_object_set_new(vocab, merges[m][2], json_integer(256 + m));
    }
    json_t *added = json_pack("[{s:i,s:s,s:b,s:b,s:b,s:b,s:b}, {s:i,s:s,s:b,s:b,s:b,s:b,s:b}, {s:i,s:s,s:b,s:b,s:b,s:b,s:b}]",
        "id", 262, "content", "<|endoftext|>", "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1,
        "id", 263, "content", "<|im_start|>", "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1,
        "id", 264, "content", "<|im_end|>", "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1);
    json_t *root = json_pack("{s:s, s:o, s:n, s:{s:s,s:b,s:b,s:b}, s:{s:s,s:b,s:b,s:b}, s:{s:s,s:b,s:b,s:b}, "
                             "s:{s:s, s:o, s:o, s:n, s:n, s:n, s:b, s:b}}",
        "version", "1.0", "added_tokens", added, "normalizer",
        "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1,
        "post_processor", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0,
        "decoder", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1,
        "model", "type", "BPE", "vocab", vocab, "merges", merge_list, "dropout", "unk_token",
        "continuing_subword_prefix", "fuse_unk", 0, "byte_fallback", 0);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    int rc = json_dump_file(root, path, 0);
    json_decref(root);
    json_t *config = json_pack("{s:s, s:s, s:n}", "eos_token", "<|im_end|>", "pad_token", "<|endoftext|>", "bos_token");
    if (chat_template) json_object_set_new(config, "chat_template", json_string(chat_template));
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    rc |= json_dump_file(config, path, 0);
    json_decref(config);
    return rc ? -1 : 0;
}

#endif
