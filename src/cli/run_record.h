/* run_record.h: ADAPTER_DIR/run.json, what `lmtune report` needs to know
 * about a training run besides its history (train/report.h): the model,
 * the fine-tuning, every flag that differs from its default, the effective
 * batch, the trainable parameters, the data sets (examples, tokens, the
 * padding share of their batches) and the memory plan by buffer class.
 * Written atomically by `lmtune train` at every start (a --resume may
 * change flags such as --iters), before the first step. */
#ifndef LT_RUN_RECORD_H
#define LT_RUN_RECORD_H
#include <stddef.h>
#include "cli/run_data.h"
#include "cli/train_args.h"
#include "memory/plan.h"
#include "model/model.h"

#define RUN_RECORD_FILE "run.json"

typedef struct {
    const TrainArgs *args;
    const RunData *data;            /* config and data sets */
    const ModelSpec *spec;
    size_t class_bytes[MEM_CLASS_COUNT];    /* the plan by buffer class */
    size_t plan_total, plan_arena;
    double trainable, total_params;
    int iters;                      /* after --epochs */
    int world;
    int threads;                    /* OpenMP threads of a worker */
    int argc;                       /* the command line, argv[0] = "train" */
    char **argv;
} RunRecord;

int run_record_write(const char *dir, const RunRecord *r);
/* "lmtune train --model ... 'a b'": the command line as one string (heap). */
char *run_record_command(int argc, char **argv);
#endif
