/* hf_hub.h: Hugging Face repo ids on the command line. lmtune downloads
 * nothing, but a model fetched with the Hugging Face CLI on any machine is
 * used by name, as mlx_lm resolves it: from the local hub cache
 * (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub), where
 * models--ORG--NAME/refs/main names the snapshot directory
 * models--ORG--NAME/snapshots/<hash>. Data sets are not read from the hub:
 * they must be exported to JSONL first. */
#ifndef LT_HF_HUB_H
#define LT_HF_HUB_H
#include <stdbool.h>

/* ORG/NAME: one slash, letters, digits, '-', '_', '.', not a path such as
 * ./x/y or /abs/x. */
bool hf_hub_is_repo_id(const char *name);
/* --model: an existing directory as it is; a repo id from the cache;
 * otherwise the name as it is (opening it then reports the missing file).
 * A repo id that is not in the cache is one error line saying where it was
 * looked for and how to fetch it. *out is heap (mem_free). */
int hf_hub_resolve_model(const char *name, char **out);
/* --data: a repo id that is not a local directory is refused with how to
 * export it to JSONL; anything else passes. */
int hf_hub_check_data(const char *data);
#endif
