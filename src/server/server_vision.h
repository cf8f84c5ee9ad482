/* server_vision.h: image content parts of chat requests (server_vision.c). */
#ifndef BS_SERVER_VISION_H
#define BS_SERVER_VISION_H

#include "server/server.h"

#include <jansson.h>

#define SRV_MAX_IMAGES 16
#define SRV_IMAGE_BUDGET (512L << 20)

/* A small PNG can hold a 4096-token image: 50 MB of float pixels once preprocessed. Requests
 * that wait for a slot keep theirs, so all of them together draw from one budget
 * (--image-budget); srv_vision_add answers 503 past it. Set once when the server starts. */
void srv_vision_set_budget(long bytes);
long srv_vision_held(void);   /* bytes held now (tests, metrics) */

/* A request's images and the placeholder its message text holds for each. */
typedef struct srv_vision {
    bs_gen_image *im;          /* n images: grid and hash; rows (embd) only once encoded */
    bs_image_pixels *px;       /* their preprocessed pixels, until encoded (both arrays are
                                  freed by srv_vision_free, or handed over to the task) */
    int n;
    long rows;                 /* context rows its images take (known from their headers) */
    char tag[48];              /* "<|image_pad:" + random hex + "|>" */
    char part[96];             /* what an image part adds to a message: <|vision_start|> tag <|vision_end|> */
} srv_vision;

void srv_vision_init(srv_vision *v);   /* a fresh random tag */
void srv_vision_free(srv_vision *v);
/* An image_url content part: decoded and preprocessed (its grid known, so the prompt's length
 * is), appended to v (n_ctx: the slots' context). 0; -1 + the 400 message in err (no --mmproj, a remote URL, bad base64, a
 * bad image, too many images); -2 + the 503 message (the image budget is spent); -3 + the 400
 * message when v's images take the whole context (known from the header, before decoding). The encoder
 * does not run here: this is the HTTP thread. */
int srv_vision_add(srv *s, srv_vision *v, const json_t *part, int n_ctx, char *err, size_t errlen);
/* Encode the images of im[0..n) that have no rows yet from px (freed then), on the scheduler's
 * thread just before a slot takes the request. 0, or -1 + message. */
int srv_vision_encode(const bs_mmproj *m, bs_gen_image *im, bs_image_pixels *px, int n, int n_threads, char *err,
                      size_t errlen);
/* Free the rows and pixels of n images (the arrays themselves too). */
void srv_images_free(bs_gen_image *im, bs_image_pixels *px, int n);

/* A piece of the rendered prompt between image tags: text[b, e) and the message spans in it
 * (relative to b) for srv_tokenize_prompt. */
typedef struct srv_piece {
    size_t b, e;
    bs_chat_span *sp;
    size_t n_sp;
} srv_piece;
/* The prompt cut at v's tags (v->n + 1 pieces); -1 + bs_error if the tags found are not v->n
 * (the pieces are returned anyway, for srv_pieces_free). */
int srv_vision_split(const srv_vision *v, const char *text, size_t len, const bs_chat_span *sp, size_t n_sp,
                     srv_piece **out, size_t *n_out);
void srv_pieces_free(srv_piece *p, size_t n);

#endif
