/* adapter_io.h: an adapter directory (MLX-LM format) as a model sees it: the
 * spec it implies (type, layers, rank, scale, adapted projections) and the
 * loading of adapters.safetensors into the model's trainable tensors, with
 * MLX-LM's checks and messages. */
#ifndef LT_ADAPTER_IO_H
#define LT_ADAPTER_IO_H
#include "model/fuse.h"
#include "model/model.h"

/* Fills the adapter part of `spec` from DIR/adapter_config.json and the
 * tensor names of DIR/adapters.safetensors (which projections are adapted). */
int adapter_spec_from_dir(const char *adapter_dir, ModelSpec *spec);
/* Loads FILE (an adapters.safetensors) into the model's trainable tensors.
 * strict: every trainable tensor must be present (false: as MLX-LM's
 * strict=False, missing ones keep their values). Unknown names or wrong
 * shapes: "Adapter at FILE contains incompatible tensors:\n  NAME: ...". */
int adapter_load_file(Model *m, const char *file, bool strict);
/* (declarations above) */
#endif

/* The memory plan of a model opened for inference with an optional
 * adapter (what model_open_inference allocates, plus the weights used in
 * place from the mapped file), planned for the dtype the safetensors
 * headers give; reads config.json, adapter_config.json and headers only. */
int model_plan_inference(MemPlan *plan, ModelSpec *spec, const char *model_dir, const char *adapter_dir,
                         int rows, int tokens, int kv_tokens, int max_positions);
/* Opens a model for inference (eval, generate, tests) with an optional
 * adapter: plans the arena for `rows` x `tokens` inputs and a KV cache of
 * kv_tokens (0 = none) for generating up to max_positions positions (0: as
 * many as the cache holds; more: the cache rotates, ModelSpec), creates it,
 * loads weights and the adapter. */
int model_open_inference(Model **out, Arena *arena, const char *model_dir, const char *adapter_dir,
                         int rows, int tokens, int kv_tokens, int max_positions);
