/* yaml_file.h: the flag-parser tests' YAML fixture: TEXT written to one
 * per-process file under /tmp (overwritten by the next call). */
#ifndef LT_TEST_YAML_FILE_H
#define LT_TEST_YAML_FILE_H
#include <stdio.h>
#include <unistd.h>

static const char *write_yaml(const char *text) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/lmtune_test_yaml_%d.yaml", (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); return path; }
    fputs(text, f);
    fclose(f);
    return path;
}
#endif
