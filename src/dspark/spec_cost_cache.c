/* spec_cost_cache.c: the auto depth's cost measurements, cached per machine + model pair
 * (dspark.md §6: "measure once"), so a run does not spend its first steps re-measuring.
 *
 * One line per (target file, drafter file, threads, CPU dispatch level, the target's device:
 * a target on a GPU costs nothing like one on the CPU, so each has its own entry) in
 * $XDG_CACHE_HOME/bitspark/dspark-costs (or ~/.cache/...): the key, then the block size and
 * the cost ratios of bs_spec_depth, how many drafts those cover (deeper ones are measured when
 * a run first wants them), and the acceptance the last run ended with (once it observed a few)
 * and what its probes cost: the next run starts from them. Files are identified by path,
 * size and mtime, so a changed model is measured again. BITSPARK_NO_COST_CACHE=1 turns the
 * cache off. */
#include "dspark/spec_cost_cache.h"
#include "cpu/compute.h"
#include "io/atomic_file.h"
#include "io/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LINE_MAX_LEN 4096
#define MIN_OBS_TO_REMEMBER 3   /* acceptance observations before a run's p is worth keeping */

static bool enabled(void) { return !bs_env_flag("BITSPARK_NO_COST_CACHE"); }

static int cache_file(char *buf, size_t cap, bool make_dir) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && *xdg) n = snprintf(buf, cap, "%s/bitspark", xdg);
    else if (home && *home) n = snprintf(buf, cap, "%s/.cache/bitspark", home);
    else return -1;
    if (n < 0 || (size_t)n + 20 > cap) return -1;
    if (make_dir) {
        char parent[LINE_MAX_LEN];
        snprintf(parent, sizeof parent, "%.*s", (int)(strrchr(buf, '/') - buf), buf);
        mkdir(parent, 0755);
        if (mkdir(buf, 0755) && errno != EEXIST) return -1;
    }
    strcat(buf, "/dspark-costs");
    return 0;
}

static void file_id(char *out, size_t cap, const char *path) {
    struct stat st;
    char *real = realpath(path, NULL);
    if (stat(path, &st)) memset(&st, 0, sizeof st);
    snprintf(out, cap, "%s:%lld:%lld", real ? real : path, (long long)st.st_size, (long long)st.st_mtime);
    free(real);
}

static void make_key(char *key, size_t cap, const char *target, const char *drafter, int n_threads,
                     const char *device) {
    char a[1024], b[1024];
    file_id(a, sizeof a, target);
    file_id(b, sizeof b, drafter);
    snprintf(key, cap, "%s|%s|t%d|%s|%.200s|v3", a, b, n_threads, bs_cpu_level_name(bs_cpu_level()),
             device && *device ? device : "cpu");
    for (char *p = key; *p; p++)
        if (*p == '\t' || *p == '\n') *p = ' ';
}

int bs_cost_cache_load(bs_spec_depth *d, const char *target, const char *drafter, int n_threads,
                       const char *device) {
    char path[LINE_MAX_LEN], key[3000], line[LINE_MAX_LEN];
    if (!enabled() || cache_file(path, sizeof path, false)) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    make_key(key, sizeof key, target, drafter, n_threads, device);
    const size_t kl = strlen(key);
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, kl) || line[kl] != '\t') continue;
        char *p = line + kl + 1, *end;
        long block = strtol(p, &end, 10);
        if (end == p || block != d->block) continue;
        double v[2 * BS_DEPTH_MAX + 4];
        const int want = 2 * d->block + 4;
        int n = 0;
        for (p = end; n < want; n++, p = end) {
            v[n] = strtod(p, &end);
            if (end == p || !(v[n] >= 0) || v[n] > 1e9) break;
        }
        if (n != want || !(v[0] > 0)) continue;
        /* then: drafts measured, the last run's acceptance (-1: none) and probe cost */
        const long mk = strtol(p, &end, 10);
        if (end == p || mk < 1 || mk > d->block) continue;
        p = end;
        const double acc = strtod(p, &end);
        if (end == p) continue;
        p = end;
        const double probe = strtod(p, &end);
        if (end == p || !(probe >= 0 && probe < 1e6)) continue;
        /* v: verify(1) s, ratios for widths 1..B+1, draft ratio, append ratio, draft ratios for
         * k = 1..B drafts */
        double verify[BS_DEPTH_MAX + 2], draft[BS_DEPTH_MAX + 1];
        for (int w = 1; w <= d->block + 1; w++) verify[w] = v[w] * v[0];
        bs_depth_calibrate(d, verify, v[d->block + 2] * v[0], v[d->block + 3] * v[0]);
        for (int k = 1; k <= d->block; k++) draft[k] = v[d->block + 3 + k] * v[0];
        bs_depth_calibrate_draft(d, draft);
        d->measured_k = (int)mk;
        if (acc >= 0.0 && acc <= 1.0) bs_depth_seed_p(d, acc);
        d->probe_r = probe;
        found = 1;
    }
    fclose(f);
    return found;
}

void bs_cost_cache_store(const bs_spec_depth *d, const char *target, const char *drafter, int n_threads,
                         const char *device) {
    char path[LINE_MAX_LEN], key[3000], line[LINE_MAX_LEN];
    if (!enabled() || !d->calibrated || cache_file(path, sizeof path, true)) return;
    make_key(key, sizeof key, target, drafter, n_threads, device);
    /* a crash mid-write keeps the previous cache (the temporary is renamed over it at the end) */
    bs_afile *af = bs_afile_open(path);
    if (!af) return;
    FILE *out = bs_afile_fp(af);
    FILE *in = fopen(path, "r");
    const size_t kl = strlen(key);
    int kept = 0;
    while (in && fgets(line, sizeof line, in) && kept < 200)   /* other keys, bounded */
        if (strncmp(line, key, kl) || line[kl] != '\t') { fputs(line, out); kept++; }
    if (in) fclose(in);
    fprintf(out, "%s\t%d %.9g", key, d->block, d->verify1_s);
    for (int w = 1; w <= d->block + 1; w++) fprintf(out, " %.6g", d->verify_r[w]);
    fprintf(out, " %.6g %.6g", d->draft_r, d->append_r);
    for (int k = 1; k <= d->block; k++) fprintf(out, " %.6g", d->draft_kr[k]);
    const bool p_ok = d->n_obs >= MIN_OBS_TO_REMEMBER || d->p_known;
    fprintf(out, " %d %.4f %.4g", d->measured_k, p_ok ? d->p : -1.0, d->probe_r);
    fputc('\n', out);
    if (bs_afile_commit(af)) bs_log(1, "cost cache not saved: %s\n", bs_last_error());
}
