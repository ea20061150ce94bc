/* train_plan.h: the memory plan of a training run's model and optimizer, the
 * one `lmtune train` carves and `lmtune plan` prints: the model's layout walk
 * (weights converted at load, trainable tensors, gradients, which are also
 * the accumulation sum, activations, checkpoints, workspaces), the frozen
 * weights used in place from the mapped files (notes), and the optimizer
 * moments of the trainable tensors the spec implies. Reads headers only. */
#ifndef LT_TRAIN_PLAN_H
#define LT_TRAIN_PLAN_H
#include "formats/hf_config.h"
#include "memory/plan.h"
#include "model/model.h"
#include "train/optimizer.h"

int train_plan_layout(MemPlan *plan, const char *model_dir, const ModelConfig *cfg, const ModelSpec *spec,
                      const OptimizerConfig *oc);
#endif
