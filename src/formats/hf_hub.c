/* hf_hub.c: see hf_hub.h. The cache layout is huggingface_hub's
 * (file_download.py: repo_folder_name, refs/<revision>, snapshots/<hash>). */
#include "formats/hf_hub.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"

bool hf_hub_is_repo_id(const char *name) {
    const char *slash = strchr(name, '/');
    if (!slash || strchr(slash + 1, '/') || slash == name || !slash[1]) return false;
    if (name[0] == '.' || slash[1] == '.') return false;   /* ./x, ../x, x/.. are paths */
    for (const char *p = name; *p; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                  c == '.' || c == '/';
        if (!ok) return false;
    }
    return true;
}

/* HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub. */
static char *hub_cache(void) {
    const char *c = getenv("HF_HUB_CACHE");
    if (c && *c) return mem_strdup(c);
    const char *home = getenv("HF_HOME");
    if (home && *home) return path_join(home, "hub");
    const char *user = getenv("HOME");
    char *base = path_join(user && *user ? user : ".", ".cache/huggingface");
    char *hub = base ? path_join(base, "hub") : NULL;
    mem_free(base);
    return hub;
}

int hf_hub_resolve_model(const char *name, char **out) {
    *out = NULL;
    /* a directory or a file that exists (a GGUF base: dir/model.gguf) is a path */
    if (dir_exists(name) || file_exists(name) || !hf_hub_is_repo_id(name)) {
        *out = mem_strdup(name);
        return *out ? 0 : -1;
    }
    char *cache = hub_cache();
    TRY_PTR(cache);
    char folder[512];
    snprintf(folder, sizeof folder, "models--%s", name);
    char *slash = strchr(folder, '/');
    if (slash) {   /* models--ORG--NAME */
        memmove(slash + 2, slash + 1, strlen(slash + 1) + 1);
        slash[0] = '-';
        slash[1] = '-';
    }
    char *repo = path_join(cache, folder);
    char *ref_file = repo ? path_join(repo, "refs/main") : NULL;
    char *ref = NULL, *snapshots = NULL, *snap = NULL;
    int rc = -1;
    if (!ref_file) goto out;
    size_t n = 0;
    if (!file_exists(ref_file) || file_read_all(ref_file, 256, &ref, &n) < 0) {
        error_set("%s: not a local directory, and not in the Hugging Face cache (no %s); download it first with "
                  "`hf download %s` (or `huggingface-cli download %s`), or give the model's directory",
                  name, ref_file, name, name);
        goto out;
    }
    while (n > 0 && (ref[n - 1] == '\n' || ref[n - 1] == '\r' || ref[n - 1] == ' ')) ref[--n] = 0;
    snapshots = path_join(repo, "snapshots");
    snap = snapshots ? path_join(snapshots, ref) : NULL;
    if (!snap) goto out;
    if (!n || strchr(ref, '/') || !dir_exists(snap)) {
        error_set("%s: the Hugging Face cache names snapshot \"%s\" (%s), but %s is not there; download it again "
                  "with `hf download %s`", name, ref, ref_file, snap, name);
        goto out;
    }
    *out = snap;
    snap = NULL;
    rc = 0;
out:
    mem_free(cache);
    mem_free(repo);
    mem_free(ref_file);
    mem_free(ref);
    mem_free(snapshots);
    mem_free(snap);
    return rc;
}

int hf_hub_check_data(const char *data) {
    if (!data || dir_exists(data) || !hf_hub_is_repo_id(data)) return 0;
    return error_set("--data %s: not a local directory; lmtune reads local JSONL files, so a Hugging Face data set "
                     "must be exported first (DIR/train.jsonl, valid.jsonl, test.jsonl, e.g. with datasets' "
                     "Dataset.to_json) and given as --data DIR", data);
}
