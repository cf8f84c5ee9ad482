/* sampler_order.c: llama.cpp's names and letters of the chain's stages -> which stages run and in
 * what order (bs_sampler_params.order), for `samplers` / --samplers / --sampling-seq. */
#include "sample/sampler.h"

#include <stdio.h>
#include <string.h>

char bs_sampler_stage_letter(const char *name) {
    static const struct { const char *name; char c; } names[] = {
        {"penalties", 'e'}, {"dry", 'd'}, {"top_k", 'k'}, {"top-k", 'k'}, {"top_p", 'p'}, {"top-p", 'p'},
        {"nucleus", 'p'}, {"min_p", 'm'}, {"min-p", 'm'}, {"temperature", 't'}, {"temp", 't'}, {"typ_p", 'y'},
        {"typ-p", 'y'}, {"typ", 'y'}, {"typical_p", 'y'}, {"typical-p", 'y'}, {"typical", 'y'}, {"xtc", 'x'},
        {"top_n_sigma", 's'}, {"top-n-sigma", 's'},
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(name, names[i].name)) return names[i].c;
    return 0;   /* unknown: skipped (llama.cpp's infill stage, FIM's end handling, is not here) */
}

const char *bs_sampler_stage_name(char letter) {
    switch (letter) {
    case 'e': return "penalties";
    case 'd': return "dry";
    case 's': return "top_n_sigma";
    case 'k': return "top_k";
    case 'y': return "typ_p";
    case 'p': return "top_p";
    case 'm': return "min_p";
    case 'x': return "xtc";
    case 't': return "temperature";
    default: return NULL;
    }
}

void bs_sampler_add_stage(char letter, char order[16]) {
    if (!letter || !strchr(BS_SAMPLER_STAGES, letter) || strchr(order, letter)) return;
    const size_t n = strlen(order);
    order[n] = letter;
    order[n + 1] = 0;
}

void bs_sampler_parse_order(const char *spec, bool letters, char order[16]) {
    order[0] = 0;
    if (letters) {   /* unknown letters (llama.cpp's i, infill) are skipped */
        for (const char *c = spec; *c; c++) bs_sampler_add_stage(*c, order);
        return;
    }
    char name[64];
    for (const char *p = spec; *p;) {
        const size_t k = strcspn(p, ";");
        snprintf(name, sizeof name, "%.*s", (int)(k < sizeof name ? k : sizeof name - 1), p);
        bs_sampler_add_stage(bs_sampler_stage_letter(name), order);
        p += k + (p[k] == ';');
    }
}

void bs_sampler_use_stages(bs_sampler_params *p, const char *order) {
    const bool on[128] = {['e'] = strchr(order, 'e') != NULL, ['d'] = strchr(order, 'd') != NULL,
                          ['s'] = strchr(order, 's') != NULL, ['k'] = strchr(order, 'k') != NULL,
                          ['y'] = strchr(order, 'y') != NULL, ['p'] = strchr(order, 'p') != NULL,
                          ['m'] = strchr(order, 'm') != NULL, ['x'] = strchr(order, 'x') != NULL,
                          ['t'] = strchr(order, 't') != NULL};
    if (!on['e']) p->repeat_penalty = 1, p->presence_penalty = p->frequency_penalty = 0;
    if (!on['d']) p->dry_multiplier = 0;
    if (!on['s']) p->top_n_sigma = -1;
    if (!on['k']) p->top_k = 0;
    if (!on['y']) p->typical_p = 1;
    if (!on['p']) p->top_p = 1;
    if (!on['m']) p->min_p = 0;
    if (!on['x']) p->xtc_probability = 0;
    if (!on['t']) p->temp = 1, p->dynatemp_range = 0;   /* (llama.cpp's greedy lives in that stage too) */
    snprintf(p->order, sizeof p->order, "%s", order);
}
