/* progress.h: a progress bar for long operations (synth, quantize, convert, model load).
 *
 * On a terminal (stderr is a tty) the bar is redrawn in place at most ten times a second:
 * label, bar, bytes done / total, rate and ETA. Otherwise nothing is printed until
 * bs_progress_end, which writes one summary line ("label: 3.80 GB in 12.1 s, 314 MB/s").
 * Both go through stderr and are silent at bs_log_level 0. BITSPARK_PROGRESS=0 turns the bar
 * off (summary only), =1 forces it on (for trying it out through a pipe). */
#ifndef BS_PROGRESS_H
#define BS_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct bs_progress {
    char label[64];
    uint64_t total, done;
    double t0, last_draw;
    bool bar;           /* drawing in place (terminal) */
    bool drawn;         /* something is on the current line */
} bs_progress;

void bs_progress_begin(bs_progress *p, const char *label, uint64_t total_bytes);
void bs_progress_add(bs_progress *p, uint64_t bytes);
/* Clear the bar and print the summary line (extra may be NULL or e.g. "851 tensors"). */
void bs_progress_end(bs_progress *p, const char *extra);
/* Erase the bar without a summary (for callers that print their own). */
void bs_progress_clear(bs_progress *p);
/* Human-readable bytes ("3.80 GB", "512 KB") into buf. */
const char *bs_fmt_bytes(uint64_t n, char *buf, int len);

#endif
