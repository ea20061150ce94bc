/* test_args.c: the flag parser of `lmtune train`: MLX-LM's defaults, YAML
 * (-c) with MLX-LM's sections, precedence command line > YAML > defaults,
 * one clear error per bad value, --help. The CLI is not part of the library,
 * so the parser's sources are compiled into this test. */
#include "cli/args.c"
#include "cli/train_args.c"
#include <unistd.h>
#include "check.h"
#include "yaml_file.h"

static int parse(TrainArgs *a, const char *line) {
    char buf[2048], *argv[64];
    int argc = 0;
    snprintf(buf, sizeof buf, "train %s", line);
    for (char *tok = strtok(buf, " "); tok && argc < 63; tok = strtok(NULL, " ")) argv[argc++] = tok;
    argv[argc] = NULL;
    train_args_default(a);
    /* The strings point into buf: copy what the checks read. */
    static char keep[2048];
    memcpy(keep, buf, sizeof buf);
    for (int i = 0; i < argc; i++) argv[i] = keep + (argv[i] - buf);
    return train_args_parse(a, argc, argv);
}

int main(void) {
    TrainArgs a;
    /* MLX-LM defaults. */
    CHECK(parse(&a, "--model m") == 0);
    CHECK(!strcmp(a.data, "data") && !strcmp(a.fine_tune_type, "lora") && !strcmp(a.optimizer, "adam"));
    CHECK(a.num_layers == 16 && a.batch_size == 4 && a.iters == 1000 && a.val_batches == 25);
    CHECK(a.learning_rate == 1e-5 && a.steps_per_report == 10 && a.steps_per_eval == 200);
    CHECK(!strcmp(a.adapter_path, "adapters") && a.save_every == 100 && a.test_batches == 500);
    CHECK(a.max_seq_length == 2048 && a.grad_accumulation_steps == 1 && a.seed == 0);
    CHECK(!a.mask_prompt && !a.test && !a.grad_checkpoint && !a.resume);
    CHECK(a.lora.rank == 8 && a.lora.scale == 20.0 && a.lora.dropout == 0.0 && a.lora.n_keys == 0);
    CHECK(!a.lr_schedule.set && a.optimizer_config.kind == OPT_ADAM && !a.optimizer_config.adam.bias_correction);
    CHECK(!strcmp(a.loss_normalization, "mean") && !strcmp(a.weights_dtype, "auto") && a.max_grad_norm == 0);
    CHECK(!train_args_was_set(&a, "iters") && train_args_was_set(&a, "model"));

    /* Command-line values, both spellings. */
    CHECK(parse(&a, "--model m --batch-size=2 --iters 50 --learning-rate 2e-4 --fine-tune-type dora --mask-prompt "
                    "--num-layers -1 --optimizer adamw --memory-limit 7.5GiB --seed 42 --grad-checkpoint --test") == 0);
    CHECK(a.batch_size == 2 && a.iters == 50 && a.learning_rate == 2e-4 && !strcmp(a.fine_tune_type, "dora"));
    CHECK(a.mask_prompt && a.num_layers == -1 && a.optimizer_config.kind == OPT_ADAMW && a.seed == 42);
    CHECK(a.memory_limit == (size_t)(7.5 * 1024 * 1024 * 1024) && a.grad_checkpoint && a.test);
    CHECK(parse(&a, "--model m --batch-size auto") == 0 && a.batch_size == 0);
    CHECK(parse(&a, "--model m --num-layers 0") == 0 && a.num_layers == -1);

    /* Errors: one clear line each. */
    CHECK(parse(&a, "--model m --batch-size x") < 0);
    CHECK_ERROR_CONTAINS("--batch-size: expected a positive integer or auto, got \"x\"");
    CHECK(parse(&a, "--model m --batch-size 0") < 0);
    CHECK_ERROR_CONTAINS("--batch-size: expected a positive integer or auto, got \"0\"");
    CHECK(parse(&a, "--model m --iters 1.5") < 0);
    CHECK_ERROR_CONTAINS("--iters: expected a non-negative integer, got \"1.5\"");
    CHECK(parse(&a, "--model m --fine-tune-type qlora") < 0);
    CHECK_ERROR_CONTAINS("--fine-tune-type: expected one of lora,dora,full, got \"qlora\"");
    CHECK(parse(&a, "--model m --learning-rate fast") < 0);
    CHECK_ERROR_CONTAINS("--learning-rate: expected a non-negative number, got \"fast\"");
    CHECK(parse(&a, "--model m --lerning-rate 1") < 0);
    CHECK_ERROR_CONTAINS("unknown flag --lerning-rate");
    CHECK(parse(&a, "--model m --iters") < 0);
    CHECK_ERROR_CONTAINS("--iters: expected a value");
    CHECK(parse(&a, "--model m --grad-accumulation-steps 0") < 0);
    CHECK_ERROR_CONTAINS("grad_accumulation_steps must be at least 1");
    CHECK(parse(&a, "--model m --memory-limit lots") < 0);
    CHECK_ERROR_CONTAINS("--memory-limit: expected a size");
    CHECK(parse(&a, "--model m --epochs 2 --iters 10") < 0);
    CHECK_ERROR_CONTAINS("--epochs and --iters both given");
    CHECK(parse(&a, "--data d") < 0);
    CHECK_ERROR_CONTAINS("--model is required");
    CHECK(parse(&a, "--model m stray") < 0);
    CHECK_ERROR_CONTAINS("unexpected argument \"stray\"");

    /* YAML: flags by underscore name, MLX-LM's sections, floats like 1e-5. */
    const char *y = write_yaml(
        "model: base\n"
        "batch_size: 2\n"
        "iters: 300\n"
        "learning_rate: 1e-5\n"
        "mask_prompt: true\n"
        "resume_adapter_file: null\n"
        "fine_tune_type: dora\n"
        "optimizer: sgd\n"
        "report_to: null\n"
        "lora_parameters:\n  keys: [\"self_attn.q_proj\", \"self_attn.v_proj\"]\n  rank: 16\n  scale: 10.0\n  dropout: 0.05\n"
        "lr_schedule:\n  name: cosine_decay\n  warmup: 100\n  warmup_init: 1e-7\n  arguments: [1e-5, 1000, 1e-7]\n"
        "optimizer_config:\n  sgd:\n    momentum: 0.9\n    nesterov: true\n  adam:\n    betas: [0.9, 0.98]\n    bias_correction: true\n"
        "  adafactor:\n    beta_1: null\n    relative_step: false\n");
    char line[256];
    snprintf(line, sizeof line, "-c %s --iters 20", y);
    CHECK(parse(&a, line) == 0);
    CHECK(!strcmp(a.model, "base") && a.batch_size == 2 && a.learning_rate == 1e-5 && a.mask_prompt);
    CHECK(a.iters == 20);   /* the command line wins over YAML */
    CHECK(a.resume_adapter_file == NULL && !strcmp(a.fine_tune_type, "dora"));
    CHECK(a.optimizer_config.kind == OPT_SGD && a.optimizer_config.sgd.momentum == 0.9 && a.optimizer_config.sgd.nesterov);
    CHECK(a.optimizer_config.adam.betas[1] == 0.98 && a.optimizer_config.adam.bias_correction);
    CHECK(!a.optimizer_config.adafactor.relative_step && isnan(a.optimizer_config.adafactor.beta_1));
    CHECK(a.lora.n_keys == 2 && !strcmp(a.lora.keys[1], "self_attn.v_proj") && a.lora.rank == 16);
    CHECK(a.lora.scale == 10.0 && a.lora.dropout == 0.05);
    CHECK(a.lr_schedule.set && !strcmp(a.lr_schedule.name, "cosine_decay") && a.lr_schedule.warmup == 100);
    CHECK(a.lr_schedule.warmup_init == 1e-7 && a.lr_schedule.n_arguments == 3 && a.lr_schedule.arguments[1] == 1000);
    CHECK(train_args_was_set(&a, "batch-size") && !train_args_was_set(&a, "seed"));
    /* -c after the flag it overrides still loses to the command line. */
    snprintf(line, sizeof line, "--batch-size 8 --config=%s", y);
    CHECK(parse(&a, line) == 0 && a.batch_size == 8 && a.iters == 300);

    /* Allocation failures while YAML strings are kept: an error, never a crash. */
    int alloc_failures = 0;
    for (long n = 1; n <= 20; n++) {
        mem_fail_at(n);
        int r = parse(&a, line);
        mem_fail_at(0);
        if (r < 0) { alloc_failures++; CHECK(error_message()[0] != 0); }
        args_release();
    }
    CHECK(alloc_failures > 0);
    y = write_yaml("model: m\nbatch_size: many\n");
    snprintf(line, sizeof line, "-c %s", y);
    CHECK(parse(&a, line) < 0);
    CHECK_ERROR_CONTAINS(": batch_size: expected a positive integer or auto, got \"many\"");
    y = write_yaml("model: m\nbogus_key: 1\n");
    CHECK(parse(&a, line) < 0);
    CHECK_ERROR_CONTAINS("unknown option \"bogus_key\"");
    y = write_yaml("model: m\nlora_parameters:\n  alpha: 16\n");
    CHECK(parse(&a, line) < 0);
    CHECK_ERROR_CONTAINS("takes `scale`");
    y = write_yaml("model: m\nlr_schedule:\n  name: cosine_decay\n");
    CHECK(parse(&a, line) < 0);
    CHECK_ERROR_CONTAINS("lr_schedule needs a name and arguments");
    y = write_yaml("model: [unclosed\n");
    CHECK(parse(&a, line) < 0);
    CHECK_ERROR_CONTAINS("YAML error");
    CHECK(parse(&a, "--model m -c /nonexistent/x.yaml") < 0);
    CHECK_ERROR_CONTAINS("/nonexistent/x.yaml: cannot open the config file");
    unlink(y);

    /* --help lists every flag with its default. */
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    train_args_default(&a);
    args_print_help(&TRAIN_ARGS_TABLE, &a, mem);
    fclose(mem);
    for (size_t i = 0; i < TRAIN_ARGS_TABLE.n_specs; i++) {
        char flag[80];
        snprintf(flag, sizeof flag, "--%s", TRAIN_ARGS_TABLE.specs[i].name);
        CHECK_MSG(strstr(buf, flag) != NULL, "%s missing from --help", flag);
    }
    CHECK(strstr(buf, "--batch-size N|auto") && strstr(buf, "[default: 4]") && strstr(buf, "[default: 1e-05]"));
    CHECK(strstr(buf, "[default: adapters]") && strstr(buf, "(lora|dora|full)"));
    free(buf);
    args_release();
    return check_finish("train/args");
}
