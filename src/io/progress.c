/* progress.c: see progress.h. */
#include "io/progress.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BAR_WIDTH 24
#define REDRAW_S 0.1

const char *bs_fmt_bytes(uint64_t n, char *buf, int len) {
    static const char *unit[] = {"B", "KB", "MB", "GB", "TB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1000.0 && u < 4) { v /= 1000.0; u++; }
    if (u == 0) snprintf(buf, (size_t)len, "%llu B", (unsigned long long)n);
    else snprintf(buf, (size_t)len, "%.2f %s", v, unit[u]);
    return buf;
}

static bool want_bar(void) {
    const char *e = getenv("BITSPARK_PROGRESS");
    if (e && *e) return strcmp(e, "0") != 0;
    return isatty(STDERR_FILENO);
}

void bs_progress_begin(bs_progress *p, const char *label, uint64_t total_bytes) {
    memset(p, 0, sizeof *p);
    snprintf(p->label, sizeof p->label, "%s", label);
    p->total = total_bytes;
    p->t0 = bs_time();
    p->bar = bs_log_level >= 1 && want_bar();
}

static void fmt_eta(double s, char *buf, size_t len) {
    if (s < 0 || s > 359999) { snprintf(buf, len, "--:--"); return; }
    int t = (int)(s + 0.5);
    if (t >= 3600) snprintf(buf, len, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, len, "%02d:%02d", t / 60, t % 60);
}

static void draw(bs_progress *p, double now) {
    double frac = p->total ? (double)p->done / (double)p->total : 0.0;
    if (frac > 1.0) frac = 1.0;
    char bar[BAR_WIDTH + 1], d[24], t[24], r[24], eta[24];
    int fill = (int)(frac * BAR_WIDTH);
    for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[BAR_WIDTH] = 0;
    double el = now - p->t0, rate = el > 0 ? (double)p->done / el : 0.0;
    fmt_eta(rate > 0 ? (double)(p->total - BS_MIN(p->done, p->total)) / rate : -1.0, eta, sizeof eta);
    fprintf(stderr, "\r\033[K%s [%s] %3.0f%% %s / %s  %s/s  ETA %s", p->label, bar, frac * 100.0,
            bs_fmt_bytes(p->done, d, sizeof d), bs_fmt_bytes(p->total, t, sizeof t),
            bs_fmt_bytes((uint64_t)rate, r, sizeof r), eta);
    fflush(stderr);
    p->drawn = true;
    p->last_draw = now;
}

void bs_progress_add(bs_progress *p, uint64_t bytes) {
    p->done += bytes;
    if (!p->bar) return;
    double now = bs_time();
    if (now - p->last_draw >= REDRAW_S || p->done >= p->total) draw(p, now);
}

void bs_progress_end(bs_progress *p, const char *extra) {
    if (bs_log_level < 1) return;
    if (p->drawn) fprintf(stderr, "\r\033[K");
    double el = bs_time() - p->t0;
    char d[24], r[24];
    fprintf(stderr, "%s: %s in %.1f s (%s/s)%s%s\n", p->label, bs_fmt_bytes(p->done, d, sizeof d), el,
            bs_fmt_bytes(el > 0 ? (uint64_t)((double)p->done / el) : 0, r, sizeof r), extra ? ", " : "",
            extra ? extra : "");
    p->drawn = false;
}

void bs_progress_clear(bs_progress *p) {
    if (p->drawn) fprintf(stderr, "\r\033[K");
    p->drawn = false;
}
