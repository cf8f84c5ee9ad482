/* gguf_internal.h: what the GGUF reader (gguf.c) and writer (gguf_write.c) share. */
#ifndef BS_GGUF_INTERNAL_H
#define BS_GGUF_INTERNAL_H

#include "formats/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GGUF_MAX_DEPTH 8          /* nesting limit for arrays of arrays */

/* Bytes of one scalar element in the file; 0 for string/array/invalid. */
size_t gguf_scalar_size(enum gguf_type t);
/* A value's strings and arrays freed, the value zeroed. */
void gguf_value_free(gguf_value *v);
bool gguf_is_signed_int(enum gguf_type t);
/* An integer value as int64 (huge: an unsigned one past INT64_MAX, cut to its low 63 bits);
 * -1 for a value of another type. */
int gguf_int_value(const gguf_value *v, int64_t *out, bool *huge);

#endif
