/* bitspark.h: the public API of libbitspark.
 *
 * Kept small on purpose: load a model, tokenize, evaluate tokens, read logits, roll back. The
 * internal headers in src/ hold the rest (GGUF, formats, kernels) for the tools built on it. */
#ifndef BITSPARK_H
#define BITSPARK_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BITSPARK_VERSION "0.1.0"

const char *bitspark_version(void);
/* The last error of the calling thread, one line, never NULL. */
const char *bitspark_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
