/* cli_spec.h: the speculative-decoding options of the generating commands (-md, --draft-max,
 * --draft-share-embeddings, --draft-no-conf) and the speculative generation loop that
 * cli_gen_loop hands over to when a drafter is loaded. */
#ifndef BS_CLI_SPEC_H
#define BS_CLI_SPEC_H

#include "bitspark.h"
#include "dspark.h"
#include "speculative.h"

#include <stdbool.h>

typedef struct cli_spec_opts {
    const char *drafter;       /* -md FILE; NULL: no speculative decoding */
    int draft_max;             /* 0..block size, BS_DRAFT_AUTO; default: the block size */
    bool draft_max_set;
    bool share_embeddings;     /* borrow the target's token_embd / output even if they differ */
    bool no_conf;              /* auto depth without the confidence-head trim */
    int draft_window;          /* --draft-window N; 0: the whole context */
} cli_spec_opts;

void cli_spec_defaults(cli_spec_opts *o);
/* Try argv[*i] as a speculative option: 1 consumed, 0 not one, -1 + bs_error. */
int cli_spec_parse(cli_spec_opts *o, int argc, char **argv, int *i);
void cli_spec_help(void);

typedef struct cli_spec {
    bs_dspark *d;
    bs_spec *sp;
    cli_spec_opts o;
    double t_load;
} cli_spec;

/* Load the drafter, check it against the target, borrow shared tensors and attach it to the
 * (fresh) session. NULL + bs_error. */
cli_spec *cli_spec_open(const cli_spec_opts *o, bs_model *target, bs_session *sess);
void cli_spec_close(cli_spec *c);

/* The generation loop and stats that use this live in cli_spec_loop.h (they need cli_gen.h,
 * which includes this header for the options). */

#endif
