/* test_server_vision: the placeholder of image parts (server_vision.c).
 *  - two requests get different random tags;
 *  - srv_vision_split cuts a rendered prompt at each tag, keeps the message spans inside each
 *    piece (relative offsets) and leaves the vision markers next to a tag outside any span, so
 *    that they tokenize as the template's own text;
 *  - a prompt whose tags do not match the images is an error;
 *  - an image part on a server without a projector is refused with the --mmproj message. */
#include "test.h"
#include "server/server_vision.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void split_checks(void) {
    srv_vision v, w;
    srv_vision_init(&v);
    srv_vision_init(&w);
    CHECKF(strcmp(v.tag, w.tag) != 0, "two requests share the tag %s", v.tag);
    CHECK(strncmp(v.part, "<|vision_start|><|image_pad:", 28) == 0);
    static bs_gen_image two[2];
    v.im = two;
    v.n = 2;
    /* user content: part, "Hi ", part, "there" */
    char text[1024];
    const char *head = "<|im_start|>user\n", *tail = "<|im_end|>\n<|im_start|>assistant\n";
    snprintf(text, sizeof text, "%s%sHi %sthere%s", head, v.part, v.part, tail);
    const size_t hl = strlen(head), pl = strlen(v.part), tl = strlen(v.tag), len = strlen(text);
    bs_chat_span sp = {hl, hl + 2 * pl + 8};
    srv_piece *pc;
    size_t np;
    CHECKF(srv_vision_split(&v, text, len, &sp, 1, &pc, &np) == 0, "%s", bs_last_error());
    CHECK_EQ_INT(np, 3);
    const size_t vs = strlen("<|vision_start|>"), ve = strlen("<|vision_end|>");
    if (np == 3) {
        CHECK_EQ_INT(pc[0].b, 0);
        CHECK_EQ_INT(pc[0].e, hl + vs);
        CHECK_EQ_INT(pc[0].n_sp, 0);   /* the content before the first image is only its marker */
        CHECK_EQ_INT(pc[1].b, hl + vs + tl);
        CHECK_EQ_INT(pc[1].n_sp, 1);   /* "Hi " */
        if (pc[1].n_sp == 1) {
            CHECK_EQ_INT(pc[1].sp[0].begin, ve);
            CHECK_EQ_INT(pc[1].sp[0].end, ve + 3);
        }
        CHECK(!memcmp(text + pc[1].b + pc[1].sp[0].begin, "Hi ", 3));
        CHECK_EQ_INT(pc[2].e, len);
        CHECK_EQ_INT(pc[2].n_sp, 1);   /* "there" */
        if (pc[2].n_sp == 1) CHECK(!memcmp(text + pc[2].b + pc[2].sp[0].begin, "there", 5));
        CHECK(!memcmp(text + pc[2].b, "<|vision_end|>there", 19));
    }
    srv_pieces_free(pc, np);
    /* another request's tag is text, not an image: one tag found for two images */
    snprintf(text, sizeof text, "%s%sHi %sthere%s", head, v.part, w.part, tail);
    CHECK(srv_vision_split(&v, text, strlen(text), &sp, 1, &pc, &np) != 0);
    srv_pieces_free(pc, np);
    v.im = NULL;
    v.n = 0;
    srv_vision_free(&v);
    srv_vision_free(&w);
}

static void no_projector(void) {
    srv s;
    memset(&s, 0, sizeof s);
    srv_vision v;
    srv_vision_init(&v);
    json_t *part = json_pack("{s:s,s:{s:s}}", "type", "image_url", "image_url", "url", "data:image/png;base64,AAAA");
    char err[256] = "";
    CHECK(srv_vision_add(&s, &v, part, 512, err, sizeof err) != 0);
    CHECKF(strstr(err, "--mmproj") != NULL, "message: %s", err);
    CHECK_EQ_INT(v.n, 0);
    json_decref(part);
    srv_vision_free(&v);
}

int main(void) {
    split_checks();
    no_projector();
    return test_summary("test_server_vision");
}
