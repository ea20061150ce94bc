/* adapter_config.h: adapter_config.json as mlx_lm.lora writes it
 * (save_config(vars(args))): every key of its argument namespace, sorted,
 * 4-space indent, the YAML sections (optimizer_config, lr_schedule) in the
 * shape they were given, so MLX-LM loads lmtune's adapter directory as its
 * own; lmtune's own settings follow, after MLX-LM's keys. */
#ifndef LT_ADAPTER_CONFIG_H
#define LT_ADAPTER_CONFIG_H
#include "cli/train_args.h"

/* Writes DIR/adapter_config.json atomically; `iters` is the number of
 * iterations the run does (--epochs resolves it); `products` is the dtype the
 * frozen products took (frozen_products: a --resume of a --weights-dtype auto
 * run takes the same, so that it continues the same computation). */
int adapter_config_write(const TrainArgs *a, int iters, const char *dir, DType products);
#endif
