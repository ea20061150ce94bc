/* ggml_types.c: the table of ggml types lmtune reads (see ggml_types.h). */
#include "base/ggml_types.h"

typedef struct {
    const char *name;
    int block_size;
    int block_bytes;
} TypeInfo;

static const TypeInfo TYPES[GGML_TYPE_LIMIT] = {
    [GGML_TYPE_F32] = {"F32", 1, 4},
    [GGML_TYPE_F16] = {"F16", 1, 2},
    [GGML_TYPE_Q4_0] = {"Q4_0", 32, 18},
    [GGML_TYPE_Q4_1] = {"Q4_1", 32, 20},
    [GGML_TYPE_Q5_0] = {"Q5_0", 32, 22},
    [GGML_TYPE_Q5_1] = {"Q5_1", 32, 24},
    [GGML_TYPE_Q8_0] = {"Q8_0", 32, 34},
    [GGML_TYPE_Q2_K] = {"Q2_K", GGML_QK_K, 84},
    [GGML_TYPE_Q3_K] = {"Q3_K", GGML_QK_K, 110},
    [GGML_TYPE_Q4_K] = {"Q4_K", GGML_QK_K, 144},
    [GGML_TYPE_Q5_K] = {"Q5_K", GGML_QK_K, 176},
    [GGML_TYPE_Q6_K] = {"Q6_K", GGML_QK_K, 210},
    [GGML_TYPE_BF16] = {"BF16", 1, 2},
};

bool ggml_type_supported(int type) {
    return type >= 0 && type < GGML_TYPE_LIMIT && TYPES[type].name != NULL;
}

const char *ggml_type_name(int type) {
    return ggml_type_supported(type) ? TYPES[type].name : NULL;
}

int ggml_block_size(int type) {
    return ggml_type_supported(type) ? TYPES[type].block_size : 0;
}

int ggml_block_bytes(int type) {
    return ggml_type_supported(type) ? TYPES[type].block_bytes : 0;
}

bool ggml_type_is_quantized(int type) {
    return ggml_block_size(type) > 1;
}

size_t ggml_row_bytes(int type, int64_t n) {
    int bs = ggml_block_size(type);
    if (bs == 0 || n < 0 || n % bs != 0) return 0;
    return (size_t)(n / bs) * (size_t)TYPES[type].block_bytes;
}
