/* server_vision.c: image content parts of chat requests (serve --mmproj).
 *
 * A part's image is decoded (server_image.c) and preprocessed when the request is parsed, on the
 * HTTP thread (bounded work: the decoders' size caps); the projector encodes it on the
 * scheduler's thread when a slot takes the request (srv_vision_encode), so a large image never
 * stalls the other connections, health probes included. Its place in the message text is a
 * placeholder, <|vision_start|> + a per-request random tag + <|vision_end|>, that no client can
 * type (the tag is drawn after the body arrived), so text that merely looks like an image part
 * stays text. After rendering, the prompt is cut at each tag into pieces that are tokenized
 * on their own (mtmd's text chunks), the vision markers around a tag outside any message span,
 * so they become the template's tokens; an image marker goes between the pieces. */
#include "server/server_vision.h"
#include "server/server_image.h"
#include "io/util.h"
#include "vision/image_prep.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define VS "<|vision_start|>"
#define VE "<|vision_end|>"

void srv_vision_init(srv_vision *v) {
    memset(v, 0, sizeof *v);
    unsigned char rnd[12];
    if (getentropy(rnd, sizeof rnd)) {   /* no entropy source: still unique per request */
        static unsigned long counter;
        uint64_t h = bs_hash_bytes(&v, sizeof v) ^ (uint64_t)time(NULL) ^
                     (__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) * 0x9e3779b97f4a7c15ULL);
        memcpy(rnd, &h, 8);
        memset(rnd + 8, 0, 4);
    }
    char *w = v->tag + snprintf(v->tag, sizeof v->tag, "<|image_pad:");
    for (size_t i = 0; i < sizeof rnd; i++) w += snprintf(w, 3, "%02x", rnd[i]);
    snprintf(w, 3, "|>");
    snprintf(v->part, sizeof v->part, VS "%s" VE, v->tag);
}

static long g_budget = SRV_IMAGE_BUDGET, g_held;

void srv_vision_set_budget(long bytes) { g_budget = bytes > 0 ? bytes : SRV_IMAGE_BUDGET; }
long srv_vision_held(void) { return __atomic_load_n(&g_held, __ATOMIC_RELAXED); }

static long px_bytes(const bs_image_pixels *p) { return p->px ? (long)p->w * p->h * 3 * (long)sizeof(float) : 0; }

/* Take n bytes from the budget, or say no. */
static bool reserve(long n) {
    long cur = __atomic_load_n(&g_held, __ATOMIC_RELAXED);
    do {
        if (cur + n > g_budget) return false;
    } while (!__atomic_compare_exchange_n(&g_held, &cur, cur + n, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return true;
}

/* Free pixels that were reserved, and give their bytes back. */
static void px_release(bs_image_pixels *p) {
    __atomic_sub_fetch(&g_held, px_bytes(p), __ATOMIC_RELAXED);
    bs_image_pixels_free(p);
}

void srv_images_free(bs_gen_image *im, bs_image_pixels *px, int n) {
    for (int k = 0; k < n; k++) {
        if (im) free((void *)im[k].embd);
        if (px) px_release(&px[k]);
    }
    free(im);
    free(px);
}

void srv_vision_free(srv_vision *v) {
    srv_images_free(v->im, v->px, v->n);
    v->im = NULL;
    v->px = NULL;
    v->n = 0;
}

int srv_vision_encode(const bs_mmproj *m, bs_gen_image *im, bs_image_pixels *px, int n, int n_threads, char *err,
                      size_t errlen) {
    for (int k = 0; k < n; k++) {
        if (im[k].embd) continue;
        bs_image_embd e;
        if (!px || !px[k].px) return bs_errbuf(err, errlen, "image %d has neither rows nor pixels", k);
        if (bs_vision_encode_pixels(m, px[k].px, px[k].w, px[k].h, n_threads, &e, err, errlen)) return -1;
        px_release(&px[k]);
        if (e.nx != im[k].nx || e.ny != im[k].ny) {   /* the grid the prompt was sized for */
            bs_image_embd_free(&e);
            return bs_errbuf(err, errlen, "image %d: the encoder made %d x %d rows, not %d x %d", k, e.nx, e.ny,
                             im[k].nx, im[k].ny);
        }
        im[k].embd = e.embd;
    }
    return 0;
}

int srv_vision_add(srv *s, srv_vision *v, const json_t *part, int n_ctx, char *err, size_t errlen) {
    if (!s->mmproj)
        return bs_errbuf(err, errlen, "image input needs a vision projector: this server was started without --mmproj");
    if (v->n == SRV_MAX_IMAGES) return bs_errbuf(err, errlen, "at most %d images per request", SRV_MAX_IMAGES);
    srv_image im;
    if (srv_image_from_part(part, SRV_IMAGE_MAX_BYTES, &im, err, errlen)) return -1;
    /* the rows it will take, from its header: an image that cannot fit is refused before its
     * pixels are decoded (an 8192 x 8192 PNG of a few KB would cost 192 MB and a second) */
    int w, h, tw, th;
    if (srv_image_dims(im.data, im.len, &w, &h, err, errlen)) { srv_image_free(&im); return -1; }
    const bs_mmproj_hparams *hp = bs_mmproj_hparams_of(s->mmproj);
    const int a = hp->patch * hp->merge;
    bs_image_target_size(w, h, a, &tw, &th);
    const long rows = (long)(tw / a) * (th / a);
    v->rows += rows;
    if (v->rows >= n_ctx) {
        srv_image_free(&im);
        snprintf(err, errlen, "the request exceeds the available context size: its images alone take %ld rows "
                 "(this one, %d x %d, takes %ld), context %d", v->rows, w, h, rows, n_ctx);
        return -3;
    }
    bs_image_pixels px;
    const int rc = bs_vision_prepare(s->mmproj, im.data, im.len, &px, err, errlen);
    const uint64_t hash = im.hash;
    srv_image_free(&im);
    if (rc) return -1;
    if (!reserve(px_bytes(&px))) {
        snprintf(err, errlen, "the server holds as many images as it may (--image-budget %ld bytes): retry soon",
                 g_budget);
        bs_image_pixels_free(&px);
        return -2;
    }
    v->im = bs_xrealloc(v->im, (size_t)(v->n + 1) * sizeof *v->im);
    v->px = bs_xrealloc(v->px, (size_t)(v->n + 1) * sizeof *v->px);
    v->px[v->n] = px;
    v->im[v->n++] = (bs_gen_image){.embd = NULL, .nx = px.nx, .ny = px.ny, .hash = hash};
    return 0;
}

/* Where the next tag starts in text[from..len), or len. */
static size_t find_tag(const srv_vision *v, const char *text, size_t len, size_t from) {
    const char *t = memmem(text + from, len - from, v->tag, strlen(v->tag));
    return t ? (size_t)(t - text) : len;
}

int srv_vision_split(const srv_vision *v, const char *text, size_t len, const bs_chat_span *sp, size_t n_sp,
                     srv_piece **out, size_t *n_out) {
    const size_t tl = strlen(v->tag), vs = strlen(VS), ve = strlen(VE);
    srv_piece *p = NULL;
    size_t n = 0, at = 0;
    for (;;) {
        const size_t end = find_tag(v, text, len, at);
        p = bs_xrealloc(p, (n + 1) * sizeof *p);
        srv_piece *c = &p[n++];
        *c = (srv_piece){.b = at, .e = end, .sp = bs_xmalloc((n_sp + 1) * sizeof *c->sp)};
        /* message text in this piece, less the vision markers next to a tag */
        const size_t lo = at + (n > 1 ? ve : 0), hi = end < len && end >= vs ? end - vs : end;
        for (size_t i = 0; i < n_sp; i++) {
            const size_t b = BS_MAX(sp[i].begin, lo), e = BS_MIN(sp[i].end, hi);
            if (b < e) c->sp[c->n_sp++] = (bs_chat_span){.begin = b - at, .end = e - at};
        }
        if (end == len) break;
        at = end + tl;
    }
    *out = p;
    *n_out = n;
    return (int)n - 1 == v->n ? 0 : bs_error("the prompt places %zu images but the request has %d", n - 1, v->n);
}

void srv_pieces_free(srv_piece *p, size_t n) {
    for (size_t i = 0; i < n; i++) free(p[i].sp);
    free(p);
}
