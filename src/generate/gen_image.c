/* gen_image.c: images in a generation request (gen_impl.h): the prompt's BS_TOKEN_IMAGE markers
 * expanded to one position per image row, and prompts with image markers tokenized.
 *
 * Each expanded image row holds a negative id that names the image's content (hash and grid)
 * through a process-wide table, so the prompt cache compares images like tokens: equal ids
 * mean the same rows. The first row of an image has an odd id, the others the even id after
 * it, so a prefix can be cut back to an image's start from the ids alone (the drafter's
 * prompt path evaluates whole images). Ids are shared by every generator of the process (the
 * server copies saved states between slots). */
#include "generate/gen_impl.h"
#include "model/session.h"
#include "io/util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct { uint64_t hash; int nx, ny; } img_key;

/* Distinct images seen by this process (16 bytes each) and an open-addressing index over them
 * (slot: entry + 1, 0 empty), so that a long-running server looks an image up in O(1). */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static img_key *reg;
static int n_reg, cap_reg;
static int *slots;
static size_t n_slots;   /* a power of two, at least twice n_reg */

static size_t slot_of(uint64_t hash, int nx, int ny) {
    uint64_t h = hash ^ ((uint64_t)(uint32_t)nx * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)(uint32_t)ny << 32);
    h ^= h >> 29;
    return (size_t)(h * 0xbf58476d1ce4e5b9ULL >> 17) & (n_slots - 1);
}

static void index_add(int k) {
    size_t i = slot_of(reg[k].hash, reg[k].nx, reg[k].ny);
    while (slots[i]) i = (i + 1) & (n_slots - 1);
    slots[i] = k + 1;
}

static void grow(void) {
    cap_reg = cap_reg ? 2 * cap_reg : 16;
    reg = bs_xrealloc(reg, (size_t)cap_reg * sizeof *reg);
    free(slots);
    n_slots = 2 * (size_t)cap_reg;
    slots = bs_xcalloc(n_slots, sizeof *slots);
    for (int k = 0; k < n_reg; k++) index_add(k);
}

/* The id of the first row of an image (-3, -5, ...); its other rows have id - 1. */
static int32_t image_id(uint64_t hash, int nx, int ny) {
    pthread_mutex_lock(&reg_mu);
    if (n_reg == cap_reg) grow();
    size_t i = slot_of(hash, nx, ny);
    int k = -1;
    for (; slots[i]; i = (i + 1) & (n_slots - 1)) {
        const img_key *e = &reg[slots[i] - 1];
        if (e->hash == hash && e->nx == nx && e->ny == ny) { k = slots[i] - 1; break; }
    }
    if (k < 0) {
        k = n_reg++;
        reg[k] = (img_key){hash, nx, ny};
        slots[i] = k + 1;
    }
    pthread_mutex_unlock(&reg_mu);
    return -3 - 2 * k;
}

static bool is_image_rest(int32_t id) { return id <= -4 && id % 2 == 0; }
bool gen_is_image_start(int32_t id) { return id <= -3 && id % 2 != 0; }

int gen_image_cut(const int32_t *prompt, int n, int len) {
    while (len > 0 && len < n && is_image_rest(prompt[len])) len--;
    return len;
}

const gen_img *gen_image_at(const bs_gen *g, int pos) {
    for (int i = 0; i < g->n_img; i++)
        if (g->img[i].pos == pos) return &g->img[i];
    return NULL;
}

int gen_text_run(const bs_gen *g, int from, int to) {
    for (int i = 0; i < g->n_img; i++)
        if (g->img[i].pos >= from && g->img[i].pos < to) to = g->img[i].pos;
    return to;
}

void gen_images_free(bs_gen *g) {
    for (int i = 0; i < g->n_img; i++) free(g->img[i].embd);
    free(g->img);
    g->img = NULL;
    g->n_img = 0;
}

/* rows: the images' rows must be there (to begin; a reuse estimate needs only grids and hashes). */
static int check_images(const bs_gen *g, const bs_gen_request *r, const int32_t *prompt, int n, bool rows,
                        long *total) {
    int markers = 0;
    for (int i = 0; i < n; i++) {
        if ((prompt[i] < 0 && prompt[i] != BS_TOKEN_IMAGE) || prompt[i] >= g->n_vocab)   /* < 0: would pose as an image's rows */
            return bs_error("token id %d (at %d) is out of range [0, %d)", prompt[i], i, g->n_vocab);
        markers += prompt[i] == BS_TOKEN_IMAGE;
    }
    if (markers != r->n_images || r->n_images < 0 || (r->n_images && !r->images))
        return bs_error("the prompt has %d image markers but the request %d images", markers, r->n_images);
    const int n_ctx = bs_session_n_ctx(g->sess);
    *total = n - markers;
    for (int k = 0; k < r->n_images; k++) {
        const bs_gen_image *im = &r->images[k];
        if (rows && !im->embd) return bs_error("image %d has no rows (not encoded)", k + 1);
        if (im->nx < 1 || im->ny < 1 || im->nx > n_ctx || im->ny > n_ctx)
            return bs_error("image %d: bad grid %dx%d", k + 1, im->nx, im->ny);
        *total += (long)im->nx * im->ny;
    }
    return 0;
}

/* The prompt with each marker expanded to its image's ids (total positions, checked). */
static int32_t *expand(const int32_t *prompt, int n, const bs_gen_image *images, long total, int *n_out) {
    int32_t *p = bs_xmalloc((size_t)(total ? total : 1) * sizeof *p);
    int j = 0, k = 0;
    for (int i = 0; i < n; i++) {
        if (prompt[i] != BS_TOKEN_IMAGE) { p[j++] = prompt[i]; continue; }
        const bs_gen_image *im = &images[k++];
        const int32_t id = image_id(im->hash, im->nx, im->ny);
        p[j++] = id;
        for (int q = 1; q < im->nx * im->ny; q++) p[j++] = id - 1;
    }
    *n_out = j;
    return p;
}

int gen_images_begin(bs_gen *g, const bs_gen_request *r, const int32_t *prompt, int n, int32_t **out, int *n_out) {
    long total = 0;
    if (check_images(g, r, prompt, n, true, &total)) return -1;
    const int n_ctx = bs_session_n_ctx(g->sess);
    if (total >= n_ctx)
        return bs_error("the prompt is %ld positions but the context holds %d (use --ctx)", total, n_ctx);
    *out = expand(prompt, n, r->images, total, n_out);
    g->img = r->n_images ? bs_xcalloc((size_t)r->n_images, sizeof *g->img) : NULL;
    const size_t E = (size_t)bs_model_n_embd(g->m);
    for (int i = 0, k = 0; i < *n_out; i++) {
        if (!gen_is_image_start((*out)[i])) continue;
        const bs_gen_image *im = &r->images[k];
        const size_t bytes = (size_t)im->nx * im->ny * E * sizeof(float);
        g->img[k] = (gen_img){.embd = bs_xmalloc(bytes), .nx = im->nx, .ny = im->ny, .pos = i};
        memcpy(g->img[k].embd, im->embd, bytes);
        g->n_img = ++k;
    }
    return 0;
}

int32_t *gen_expand_request(const bs_gen *g, const int32_t *prompt, int n, const bs_gen_image *images, int n_images,
                            int *n_out) {
    bs_gen_request r = {.images = images, .n_images = n_images};
    long total = 0;
    if (check_images(g, &r, prompt, n, false, &total) || total >= bs_session_n_ctx(g->sess)) return NULL;
    return expand(prompt, n, images, total, n_out);
}

int gen_expand_pos(const bs_gen_request *r, const int32_t *prompt, int n, int pos) {
    int out = pos, k = 0;
    for (int i = 0; i < n && i < pos && k < r->n_images; i++)
        if (prompt[i] == BS_TOKEN_IMAGE) {
            out += r->images[k].nx * r->images[k].ny - 1;
            k++;
        }
    return out;
}

/* ---- the public helpers ---------------------------------------------------------------------- */

static void append(int32_t **ids, size_t *n, size_t *cap, const int32_t *src, size_t m) {
    if (*n + m > *cap) {
        *cap = BS_MAX(*cap * 2, *n + m + 16);
        *ids = bs_xrealloc(*ids, *cap * sizeof **ids);
    }
    if (m) memcpy(*ids + *n, src, m * sizeof *src);
    *n += m;
}

int bs_tokenize_prompt_images(const bs_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n,
                              int *n_images) {
    const size_t ml = strlen(BS_IMAGE_MARKER);
    size_t cap = 0, at = 0;
    *ids = NULL;
    *n = 0;
    *n_images = 0;
    for (;;) {
        const char *m = memmem(text + at, len - at, BS_IMAGE_MARKER, ml);
        const size_t end = m ? (size_t)(m - text) : len;
        int32_t *part;
        size_t np;
        const int rc = at == 0 ? bs_tokenize_prompt(t, text, end, &part, &np)
                               : bs_tokenize(t, text + at, end - at, true, &part, &np);
        if (rc < 0) {
            free(*ids);
            *ids = NULL;
            return bs_error_prefix("prompt: ");
        }
        append(ids, n, &cap, part, np);
        free(part);
        if (!m) break;
        const int32_t marker = BS_TOKEN_IMAGE;
        append(ids, n, &cap, &marker, 1);
        ++*n_images;
        at = end + ml;
    }
    if (!*ids) *ids = bs_xmalloc(sizeof **ids);
    return 0;
}
