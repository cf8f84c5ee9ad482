/* quant_impl.h: codec functions of the quant_<family>.c files, referenced by the table in
 * quant.c. Not for use outside the format code: go through bs_type_get(). */
#ifndef BS_QUANT_IMPL_H
#define BS_QUANT_IMPL_H
#include <stdint.h>

#endif
