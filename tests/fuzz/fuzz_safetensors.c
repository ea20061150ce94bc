/* fuzz_safetensors.c: libFuzzer target for the safetensors reader. Each
 * input is a whole file (held in a memfd, opened by its /proc path) read
 * both fully and header-only; the two must agree, and every accepted file's
 * tensors must lie inside it. Build and run: make fuzz (tests/fuzz/run.sh). */
#include "base/error.h"
#include "formats/safetensors.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    int fd = memfd_create("st", 0);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    StFile full, head;
    int a = st_open(&full, path);
    int b = st_open_header(&head, path);
    if (a != b) abort();
    if (a == 0) {
        if (full.n_tensors != head.n_tensors) abort();
        for (size_t i = 0; i < full.n_tensors; i++) {
            const StTensor *t = &full.tensors[i];
            if (t->end > size - 8 - full.header_len || strcmp(t->name, head.tensors[i].name) != 0) abort();
            if (st_find(&full, t->name) != t) abort();
            st_tensor_count_nonfinite(t);
        }
        st_close(&full);
        st_close(&head);
    } else if (strncmp(error_message(), path, strlen(path)) != 0 || strchr(error_message(), '\n')) abort();
    close(fd);
    return 0;
}
