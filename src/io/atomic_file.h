/* atomic_file.h: crash-safe output files and the "never write over an input" check.
 *
 * Every bitspark writer (quantize, convert, synth, lora merge, the exporters, antidoom outputs,
 * the cost cache) goes through bs_afile: the data goes to a temporary file in the target's own
 * directory (same filesystem, so the final rename is atomic), which is fsync'ed, renamed over
 * the target and followed by an fsync of the directory. Until the rename the user's previous
 * file is untouched; after it the new file is complete. A kill -9 or power loss can at worst
 * leave a ".NAME.tmp-*" file next to the target, never a truncated file under its name. The
 * temporary is removed on every error path and, for programs that leave SIGINT / SIGTERM /
 * SIGHUP at their default action, by a signal handler before the process dies. */
#ifndef BS_ATOMIC_FILE_H
#define BS_ATOMIC_FILE_H

#include "io/util.h"

#include <stdio.h>

typedef struct bs_afile bs_afile;

/* Create the temporary for `path` (mode 0666 minus umask). NULL + bs_error on failure. */
bs_afile *bs_afile_open(const char *path);
/* The stream to write to (fully buffered, 1 MiB). Do not fclose it. */
FILE *bs_afile_fp(bs_afile *a);
/* Flush, fsync, close, rename over the target, fsync the directory; frees a. 0, or -1 with
 * bs_error naming the target (the temporary is removed and any previous file kept). */
int bs_afile_commit(bs_afile *a);
/* Give up: close and remove the temporary, keep any previous file; frees a. NULL is a no-op. */
void bs_afile_abort(bs_afile *a);

/* A streaming writer's output (the GGUF and safetensors writers): the temporary it writes and
 * the first error it met, kept until close (the first says what went wrong; a caller checks
 * once at the end instead of after every write). */
typedef struct bs_aout {
    char *path;
    bs_afile *af;
    FILE *fp;          /* bs_afile_fp(af) */
    char err[512];     /* "" while all is well */
} bs_aout;

/* Open o for path. 0, or -1 with bs_error (o then holds nothing to free). */
int bs_aout_open(bs_aout *o, const char *path);
/* Record an error unless one is already recorded. */
void bs_aout_fail(bs_aout *o, const char *fmt, ...) BS_PRINTF(2, 3);
/* With no error recorded, commit (bs_afile_commit's result); else remove the temporary, keep
 * any previous file and return -1 with bs_error("PATH: ERR"). Frees what o holds. */
int bs_aout_close(bs_aout *o);
/* Remove the temporary, keep any previous file; frees what o holds. */
void bs_aout_abort(bs_aout *o);

/* Whole small file (text, JSON) written atomically. 0 or -1 + bs_error. */
int bs_write_file_atomic(const char *path, const void *data, size_t n);

/* Refuse an output that is one of the inputs: same device and inode (other spellings of the
 * path, symlinks and hard links all resolve to the same file). Inputs that do not exist and a
 * NULL entry are skipped. 0, or -1 with bs_error("refusing to write OUT: it is the input IN"). */
int bs_check_not_input(const char *out, const char *const *inputs, int n_inputs);
/* A command's two outputs (b may be NULL): neither is an input (bs_check_not_input), and they
 * do not name the same file (one would replace the other: the same inode where both exist,
 * else the same directory and name). 0, or -1 with bs_error. */
int bs_check_outputs(const char *a, const char *b, const char *const *inputs, int n_inputs);

#endif
