/* trainable_shapes.h: the names and shapes of a run's trainable tensors,
 * from the config and the spec alone (no file read), in the model's order,
 * so the optimizer moments can be planned before any weight is loaded and
 * carved from the same arena as the model (train, plan). cmd_train checks
 * the list against model_trainables() after loading, so a drift between
 * this and the model is an error, never a silent mis-plan. */
#ifndef LT_TRAINABLE_SHAPES_H
#define LT_TRAINABLE_SHAPES_H
#include <stddef.h>
#include "formats/hf_config.h"
#include "model/model.h"

/* Fills list (value/grad NULL) when not NULL; returns the count. */
size_t train_trainable_shapes(const ModelConfig *cfg, const ModelSpec *spec, TrainableTensor *list);
/* 0 when `a` (planned) and `b` (the loaded model's) have the same names and shapes. */
int train_trainables_match(const TrainableTensor *a, size_t na, const TrainableTensor *b, size_t nb);
#endif
