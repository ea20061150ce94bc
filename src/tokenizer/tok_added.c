/* tok_added.c: added tokens (special or not) are found in the raw text
 * before any normalization, longest match first at each position, scanning
 * left to right (as transformers.js's DictionarySplitter). A byte trie
 * (first-child / next-sibling) plus a table of possible first bytes keeps
 * the scan cheap: most positions are rejected by one table lookup. */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include <string.h>

static int trie_new_node(Tokenizer *t, uint8_t byte) {
    if (t->n_trie == t->cap_trie) {
        size_t c = t->cap_trie ? t->cap_trie * 2 : 256;
        TrieNode *q = mem_realloc(t->trie, c * sizeof *q);
        if (!q) return -1;
        t->trie = q;
        t->cap_trie = c;
    }
    TrieNode *n = &t->trie[t->n_trie];
    n->first_child = -1;
    n->next_sibling = -1;
    n->token = -1;
    n->byte = byte;
    return (int)t->n_trie++;
}

int added_trie_build(Tokenizer *t) {
    t->n_trie = 0;
    memset(t->added_first_byte, 0, sizeof t->added_first_byte);
    if (trie_new_node(t, 0) < 0) return -1;
    for (size_t k = 0; k < t->n_added; k++) {
        const AddedToken *a = &t->added_tokens[k];
        if (a->len == 0) continue;
        t->added_first_byte[(uint8_t)a->content[0]] = 1;
        int32_t node = 0;
        for (size_t i = 0; i < a->len; i++) {
            uint8_t b = (uint8_t)a->content[i];
            int32_t c = t->trie[node].first_child;
            while (c >= 0 && t->trie[c].byte != b) c = t->trie[c].next_sibling;
            if (c < 0) {
                int nn = trie_new_node(t, b);
                if (nn < 0) return -1;
                t->trie[nn].next_sibling = t->trie[node].first_child;
                t->trie[node].first_child = nn;
                c = nn;
            }
            node = c;
        }
        t->trie[node].token = (int32_t)k;
    }
    return 0;
}

size_t added_match(const Tokenizer *t, const char *s, size_t len, int32_t *id) {
    if (!t->n_added || !t->added_first_byte[(uint8_t)s[0]]) return 0;
    size_t best = 0;
    int32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t b = (uint8_t)s[i];
        int32_t c = t->trie[node].first_child;
        while (c >= 0 && t->trie[c].byte != b) c = t->trie[c].next_sibling;
        if (c < 0) break;
        node = c;
        if (t->trie[node].token >= 0) {
            best = i + 1;
            *id = t->added_tokens[t->trie[node].token].id;
        }
    }
    return best;
}

const AddedToken *added_find(const Tokenizer *t, int32_t id) {
    for (size_t k = 0; k < t->n_added; k++)
        if (t->added_tokens[k].id == id) return &t->added_tokens[k];
    return NULL;
}
