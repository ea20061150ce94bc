/* gguf_requant.c: bench helper: a model directory as a GGUF file whose
 * matrices are Q4_K or Q8_0 (lmtune's f32 export, then tests/llama/requant.h).
 *   gguf_requant MODEL_DIR OUT.gguf q4_k|q8_0 */
#include "base/error.h"
#include "llama/requant.h"
#include "model/gguf_export.h"
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: gguf_requant MODEL_DIR OUT.gguf q4_k|q8_0\n");
        return 2;
    }
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s.f32.tmp", argv[2]);
    int type = !strcmp(argv[3], "q8_0") ? GGML_TYPE_Q8_0 : GGML_TYPE_Q4_K;
    if (gguf_export_model(argv[1], tmp, GGML_TYPE_F32) < 0 || requantize(tmp, argv[2], type) < 0) {
        fprintf(stderr, "gguf_requant: %s\n", error_message());
        remove(tmp);
        return 1;
    }
    remove(tmp);
    return 0;
}
