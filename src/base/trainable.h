/* trainable.h: one trainable fp32 tensor with its gradient, the unit that
 * the model exposes (model/), the optimizer updates and the checkpoints
 * save (train/), and the workers all-reduce (dist/). A plain struct here so
 * that those layers share it without including each other. */
#ifndef LT_TRAINABLE_H
#define LT_TRAINABLE_H
#include <stddef.h>
#include <stdint.h>

/* One trainable tensor, fp32. Names are MLX-LM adapter keys
 * ("model.layers.27.self_attn.q_proj.lora_a" [in, r], "...lora_b" [r, out],
 * DoRA "...m" [out]; multimodal gemma3: "language_model.model.layers...")
 * or HF weight names for full fine-tuning. */
typedef struct {
    char name[96];
    float *value;
    float *grad;            /* accumulated by model_forward_backward (+=) */
    size_t numel;
    int ndim;               /* 1, 2, or 3 (Qwen3.5's conv1d weights, full fine-tuning) */
    int64_t shape[3];
} TrainableTensor;
#endif
