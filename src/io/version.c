/* version.c: library identity and the public error accessor. */
#include "bitspark.h"
#include "io/util.h"

const char *bitspark_version(void) { return BITSPARK_VERSION; }
const char *bitspark_last_error(void) { return bs_last_error(); }
