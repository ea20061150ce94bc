/* fuzz_gguf.c: libFuzzer target for the checking GGUF reader: any input is
 * either refused with a one-line message naming the file, or parsed into
 * tensor infos whose data lies inside the file. Build and run: make fuzz. */
#include "base/error.h"
#include "formats/gguf.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    /* LMTUNE_FUZZ_WRITE_SEED=DIR: write a valid adapter GGUF as a seed and exit. */
    const char *dir = getenv("LMTUNE_FUZZ_WRITE_SEED");
    if (!dir) return 0;
    static const float a[6] = {1, 2, 3, 4, 5, 6}, b[4] = {0.5f, -1, 2, 0};
    GgufKV kv[] = {{.key = "general.type", .type = GGUF_TYPE_STRING, .str = "adapter"},
                   {.key = "adapter.lora.alpha", .type = GGUF_TYPE_FLOAT32, .f32 = 16}};
    GgufTensor t[] = {{.name = "blk.0.attn_q.weight.lora_a", .n_dims = 2, .ne = {3, 2}, .data = a},
                      {.name = "blk.0.attn_q.weight.lora_b", .n_dims = 2, .ne = {2, 2}, .data = b}};
    char path[512];
    snprintf(path, sizeof path, "%s/adapter.gguf", dir);
    if (gguf_write(path, kv, 2, t, 2) < 0) { fprintf(stderr, "%s\n", error_message()); exit(1); }
    exit(0);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    int fd = memfd_create("gguf", 0);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    GgufInfo info;
    memset(&info, 0, sizeof info);
    if (gguf_read_check(path, &info) == 0) {
        if (info.data_start > size) abort();
        gguf_info_free(&info);
    } else if (!strstr(error_message(), path) || strchr(error_message(), '\n')) {
        abort();
    }
    close(fd);
    return 0;
}
