/* run_data.h: what `lmtune train` and `lmtune plan` read before they plan:
 * config.json (the only model file read before the plan besides the
 * safetensors headers), the tokenizer and the data splits, with MLX-LM's
 * messages; and the process baseline measured right after. */
#ifndef LT_RUN_DATA_H
#define LT_RUN_DATA_H
#include <stdbool.h>
#include "cli/train_args.h"
#include "data/dataset.h"
#include "formats/hf_config.h"
#include "memory/run_plan.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    ModelConfig cfg;
    Tokenizer *tok;
    Dataset train, valid, test;
    bool have_train, have_valid, have_test;
    char *chat_template;   /* --chat-template file contents, or NULL */
    RunInputs in;          /* points into this struct */
} RunData;

/* Loads the splits (test only with --test) for `world` workers. */
int run_data_load(RunData *d, const TrainArgs *a, int world);
void run_data_free(RunData *d);
#endif
