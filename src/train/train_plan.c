/* train_plan.c: see train_plan.h. */
#include "train/train_plan.h"
#include "base/alloc.h"
#include "base/error.h"
#include "train/trainable_shapes.h"

int train_plan_layout(MemPlan *plan, const char *model_dir, const ModelConfig *cfg, const ModelSpec *spec,
                      const OptimizerConfig *oc) {
    Carver planner = {NULL, plan};
    TRY(model_layout(cfg, spec, &planner));
    if (model_dir) TRY(model_plan_weights(model_dir, cfg, spec, plan));
    size_t n = train_trainable_shapes(cfg, spec, NULL);
    TrainableTensor *shapes = mem_calloc(n ? n : 1, sizeof *shapes);
    TRY_PTR(shapes);
    train_trainable_shapes(cfg, spec, shapes);
    Optimizer probe;
    int rc = optimizer_layout(&probe, oc, shapes, n, &planner);
    if (rc == 0) optimizer_free(&probe);
    mem_free(shapes);
    return rc;
}
