/* hf_config_qwen35.h: the Qwen3.5 part of the config.json reader and writer
 * (hf_config.c calls these; the struct is qwen35_config.h). */
#ifndef LT_HF_CONFIG_QWEN35_H
#define LT_HF_CONFIG_QWEN35_H
#include <jansson.h>
#include <stdbool.h>
#include "formats/hf_config.h"

/* model_type qwen3_5, qwen3_5_text (and the MoE ones, which are refused). */
bool hf_qwen35_type(const char *model_type);
/* *text = the text config: root's text_config when nested, else root. The MoE
 * variants are refused here with a clear message. */
int hf_qwen35_select(const json_t *root, const char *type, const char *name, const json_t **text);
/* The Qwen3.5 fields (c->q35), after hf_config.c read the common ones from text. */
int hf_qwen35_parse(ModelConfig *c, const json_t *top, const json_t *text, const char *name);
/* Copies q35's tensor and adapter prefixes, head name and rotary dims into
 * the ModelConfig fields every family's code reads (after parsing, and again
 * after qwen35_detect_layout). */
void hf_qwen35_names(ModelConfig *c);
/* config.json for c (nested when c->q35.nested, else flat qwen3_5_text). */
int hf_qwen35_write(const ModelConfig *c, const char *path);
#endif
