/* test_gen_costs: how a generator with auto depth uses the per-machine cost cache. Its costs
 * come from the cache (or are measured and written) once, at its first request; later requests
 * go on from the depth it has. A request's end writes the acceptance reached at most once a
 * minute (a server's requests end many times a second, on the thread that steps every slot:
 * each write is a synced file), and the generator's end writes it whatever the time. */
#include "test.h"
#include "gen_helper.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* The acceptance field of the cache's only line (-1: not remembered; -2: no line). */
static double cached_p(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -2;
    char line[8192];
    double p = -2;
    if (fgets(line, sizeof line, f)) {
        /* ... measured_k p probe_r\n: the next-to-last field */
        char *end = line + strlen(line);
        int seen = 0;
        while (end > line && seen < 2)
            if (*--end == ' ') seen++;
        p = seen == 2 ? strtod(end, NULL) : -2;
    }
    fclose(f);
    return p;
}

int main(void) {
    const char *fx = getenv("BS_FIXTURES"), *tmp = getenv("BS_TMP");
    char model[1024], drafter[1024], dir[1024], file[1200];
    snprintf(model, sizeof model, "%s/tiny-q1_0.gguf", fx ? fx : "tests/fixtures");
    snprintf(drafter, sizeof drafter, "%s/tiny-dspark-f32.gguf", fx ? fx : "tests/fixtures");
    snprintf(dir, sizeof dir, "%s/gen_costs_cache", tmp ? tmp : "/tmp");
    snprintf(file, sizeof file, "%s/bitspark/dspark-costs", dir);
    setenv("XDG_CACHE_HOME", dir, 1);
    unsetenv("BITSPARK_NO_COST_CACHE");
    unlink(file);

    bs_engine_opts o = greedy_opts(model, drafter, BS_DRAFT_AUTO, 1024);
    o.ignore_eos = true;
    bs_engine e;
    CHECK_EQ_INT(bs_engine_open(&e, &o), 0);
    const int32_t prompt[] = {9, 100, 42, 7, 300, 12};
    gen_result r;
    CHECK_EQ_INT(gen_generate(&e, prompt, 6, 40, NULL, NULL, &r), 0);
    free(r.tokens);
    CHECKF(exists(file), "the first request measured the costs and wrote %s", file);

    unlink(file);   /* a later request's end within the minute: no write */
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(gen_generate(&e, prompt, 6, 40, NULL, NULL, &r), 0);
        free(r.tokens);
    }
    CHECKF(!exists(file), "requests ending within a minute rewrote the cache");

    bs_engine_close(&e);   /* the generator's end: the acceptance reached is written */
    const double p = cached_p(file);
    CHECKF(p >= 0 && p <= 1, "the cache after the generator's end remembers acceptance %g", p);

    /* a new generator reads those costs instead of measuring (the drafter is still the one asked) */
    CHECK_EQ_INT(bs_engine_open(&e, &o), 0);
    CHECK_EQ_INT(gen_generate(&e, prompt, 6, 10, NULL, NULL, &r), 0);
    free(r.tokens);
    const bs_spec_depth *d = bs_spec_get_depth(bs_gen_spec(e.gen));
    CHECKF(d->calibrated && d->p_known, "the second generator's depth: calibrated %d, p known %d", d->calibrated,
           d->p_known);
    bs_engine_close(&e);
    unlink(file);
    return test_summary("test_gen_costs");
}
