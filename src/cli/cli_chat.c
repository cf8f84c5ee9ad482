/* cli_chat.c: `bitspark chat`: interactive multi-turn chat in the terminal.
 *
 * Each turn re-renders the whole conversation through the chat template (the template decides
 * what earlier turns look like, e.g. Qwen3.5 drops their reasoning), tokenizes it, and lets the
 * generation engine reuse what the session already holds: since the recurrent state cannot be
 * cut at an arbitrary point, the state is saved where the history ends and the generation
 * prompt begins (the request's ckpt_at); the next turn diverges after that point (the reply is
 * re-rendered) and restarts from the saved state instead of from scratch.
 *
 * Ctrl-C stops the current reply (a SIGINT handler sets a flag the generation loop polls);
 * Ctrl-D (EOF) or /exit quits; /reset clears the conversation; /image PATH attaches an image to
 * the next message (--image ones go with the first), as image parts before its text. Reasoning is shown dimmed on a
 * terminal and between <think> tags otherwise. */
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "cli/cli_opts.h"
#include "text/reasoning.h"
#include "io/utf8.h"
#include "io/util.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) { (void)sig; interrupted = 1; }

typedef struct {
    char *role, *content, *reasoning;
} turn;

typedef struct {
    bs_engine_opts g;
    const char *system;
    int n_predict;
    bool no_think, stats, no_reuse;
} chat_opts;

typedef struct {
    bs_engine e;
    chat_opts o;
    cli_vision vis;            /* every image of the conversation, in order */
    int n_pending;             /* the last of them, not yet in a message */
    turn *msgs;
    int n_msgs, cap_msgs;
    bool tty_in, tty_out;
    /* the reply being streamed */
    bs_reasoning *rs;
    bool showing_reasoning, shown_any;
    char *reason, *content;
    size_t n_reason, n_content, cap_reason, cap_content;
} chat;

void help_chat(void) {
    printf("usage: bitspark chat -m MODEL [options]\n"
           "\n"
           "Interactive chat with the model's chat template. One line is one message.\n"
           "Ctrl-C stops a reply, Ctrl-D or /exit quits, /reset starts a new conversation.\n"
           "/image PATH attaches an image to the next message (needs --mmproj); /reset drops the\n"
           "images too.\n"
           "\n");
    cli_opts_help(CMD_CHAT);
}

static int parse(chat_opts *o, cli_vision *vis, int argc, char **argv) {
    cli_gen_defaults(&o->g);
    o->n_predict = -1;
    for (int i = 1; i < argc; i++) {
        cli_arg a;
        if (cli_next(CMD_CHAT, argc, argv, &i, &a)) return -1;
        if (!a.opt) return bs_error("unexpected argument '%s'", a.s);
        int r = cli_gen_apply(&o->g, &a);
        if (!r) r = cli_vision_apply(vis, &a);
        if (r < 0) return -1;
        if (r > 0) continue;
        switch (a.opt->id) {
        case OPT_SYSTEM: o->system = a.s; break;
        case OPT_N_PREDICT: o->n_predict = (int)a.n; break;
        case OPT_NO_THINK: o->no_think = true; break;
        case OPT_STATS: o->stats = true; break;
        case OPT_NO_REUSE: o->no_reuse = true; break;
        case OPT_QUIET: bs_log_level = 0; break;
        case OPT_VERBOSE: bs_log_level = 2; break;
        default: return bs_error("%s: not handled by chat", a.name);
        }
    }
    cli_opts_end();
    if (cli_gen_check(&o->g)) return -1;
    if (vis->n_paths && !vis->mmproj) return bs_error("--image needs --mmproj FILE (the vision projector)");
    return 0;
}

/* --- conversation ----------------------------------------------------------------------------- */

static void push_msg(chat *c, const char *role, const char *content, const char *reasoning) {
    if (c->n_msgs == c->cap_msgs) {
        c->cap_msgs = c->cap_msgs ? 2 * c->cap_msgs : 16;
        c->msgs = bs_xrealloc(c->msgs, (size_t)c->cap_msgs * sizeof *c->msgs);
    }
    c->msgs[c->n_msgs++] = (turn){bs_xstrdup(role), bs_xstrdup(content),
                                  reasoning ? bs_xstrdup(reasoning) : NULL};
}

static void pop_msg(chat *c) {
    turn *t = &c->msgs[--c->n_msgs];
    free(t->role);
    free(t->content);
    free(t->reasoning);
}

static void clear_conversation(chat *c) {
    while (c->n_msgs) pop_msg(c);
    cli_vision_truncate(&c->vis, 0);
    c->n_pending = 0;
    if (c->o.system) push_msg(c, "system", c->o.system, NULL);
}

/* Render and tokenize the conversation, with or without the generation prompt. */
static int render_tokens(chat *c, bool gen_prompt, int32_t **ids, size_t *n, bool *in_think) {
    bs_chat_msg *m = bs_xcalloc((size_t)c->n_msgs, sizeof *m);
    for (int i = 0; i < c->n_msgs; i++)
        m[i] = (bs_chat_msg){.role = c->msgs[i].role, .content = c->msgs[i].content,
                             .reasoning = c->msgs[i].reasoning};
    size_t len;
    char *text = bs_engine_render(&c->e, m, c->n_msgs, c->o.no_think ? 0 : -1, gen_prompt, &len);
    free(m);
    if (!text) return -1;
    static const char open[] = "<think>\n";
    if (in_think)
        *in_think = len >= sizeof open - 1 && !memcmp(text + len - (sizeof open - 1), open, sizeof open - 1);
    if (gen_prompt) bs_log(2, "prompt:\n%s\n", text);
    int n_img = 0;
    int rc = bs_tokenize_prompt_images(c->e.tok, text, len, ids, n, &n_img);
    free(text);
    if (!rc && n_img != c->vis.n - c->n_pending) {   /* e.g. the marker typed into a message */
        free(*ids);
        *ids = NULL;
        return bs_error("the conversation places %d images but %d were attached", n_img, c->vis.n - c->n_pending);
    }
    return rc;
}

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* --- streaming display ------------------------------------------------------------------------ */

static void append(char **buf, size_t *n, size_t *cap, const char *s, size_t len) {
    if (*n + len + 1 > *cap) {
        *cap = (*n + len + 1) * 2;
        *buf = bs_xrealloc(*buf, *cap);
    }
    memcpy(*buf + *n, s, len);
    *n += len;
    (*buf)[*n] = 0;
}

static void show(chat *c, const bs_reasoning_out *out) {
    if (out->reasoning_len) {
        if (!c->showing_reasoning) {
            fputs(c->tty_out ? "\x1b[2m" : "<think>\n", stdout);
            c->showing_reasoning = true;
        }
        fwrite(out->reasoning, 1, out->reasoning_len, stdout);
        append(&c->reason, &c->n_reason, &c->cap_reason, out->reasoning, out->reasoning_len);
    }
    if (out->content_len) {
        if (c->showing_reasoning) {
            fputs(c->tty_out ? "\x1b[0m\n\n" : "\n</think>\n\n", stdout);
            c->showing_reasoning = false;
        }
        fwrite(out->content, 1, out->content_len, stdout);
        append(&c->content, &c->n_content, &c->cap_content, out->content, out->content_len);
    }
    fflush(stdout);
}

static void emit(void *ud, const char *text, size_t len) {
    chat *c = ud;
    bs_reasoning_out out;
    bs_reasoning_feed(c->rs, text, len, &out);
    show(c, &out);
}

/* --- one turn --------------------------------------------------------------------------------- */

static int reply(chat *c) {
    int32_t *hist = NULL, *full = NULL;
    size_t n_hist, n_full;
    bool in_think = false;
    int rc = -1;
    bs_session *sess = bs_gen_session(c->e.gen);
    if (render_tokens(c, false, &hist, &n_hist, NULL) ||
        render_tokens(c, true, &full, &n_full, &in_think))
        goto done;
    if (n_full >= (size_t)bs_session_n_ctx(sess)) {
        bs_error("the conversation is %zu tokens but the context holds %d (/reset or --ctx)",
                 n_full, bs_session_n_ctx(sess));
        goto done;
    }
    bs_gen_request r;
    bs_engine_request(&c->e, &r);
    r.greedy_on_device = true;   /* plain greedy: only token ids come back from a GPU */
    r.n_predict = c->o.n_predict;
    r.interrupt = &interrupted;
    r.no_cache = c->o.no_reuse;
    r.ckpt_at = (int)common_prefix(hist, n_hist, full, n_full);   /* where the reply begins */
    r.images = c->vis.im;
    r.n_images = c->vis.n;
    c->rs = bs_reasoning_new(in_think);
    c->n_reason = c->n_content = 0;
    c->showing_reasoning = false;
    int e = bs_engine_generate(&c->e, &r, full, (int)n_full, emit, c);
    const bs_gen_stats *st = bs_gen_get_stats(c->e.gen);
    bs_log(2, "reusing %d of %d prompt positions\n", st->n_cached, st->n_cached + st->n_prompt);
    bs_reasoning_out out;
    bs_reasoning_finish(c->rs, &out);
    show(c, &out);
    bs_reasoning_free(c->rs);
    c->rs = NULL;
    if (c->showing_reasoning) fputs(c->tty_out ? "\x1b[0m" : "\n</think>", stdout);
    fputs("\n", stdout);
    fflush(stdout);
    if (e) goto done;
    push_msg(c, "assistant", c->content ? c->content : "", c->reason ? c->reason : "");
    if (st->stop == BS_GEN_INTERRUPT) fprintf(stderr, "[interrupted]\n");
    if (st->stop == BS_GEN_CTX) fprintf(stderr, "[context full: /reset to start over]\n");
    if (c->o.stats) bs_engine_print_stats(&c->e, st);
    rc = 0;
done:
    free(hist);
    free(full);
    if (c->content) c->content[0] = 0;
    if (c->reason) c->reason[0] = 0;
    return rc;
}

/* --- the loop --------------------------------------------------------------------------------- */

/* One line from stdin without its newline; 0 ok, 1 EOF, 2 interrupted. */
static int read_line(chat *c, char **line, size_t *cap) {
    if (c->tty_in) {
        fputs("> ", stdout);
        fflush(stdout);
    }
    errno = 0;
    ssize_t n = getline(line, cap, stdin);
    if (n < 0) {
        if (interrupted || errno == EINTR) {
            clearerr(stdin);
            interrupted = 0;
            fputs("\n", stdout);
            return 2;
        }
        return 1;
    }
    while (n > 0 && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r')) (*line)[--n] = 0;
    return 0;
}

static void chat_loop(chat *c) {
    char *line = NULL;
    size_t cap = 0;
    for (;;) {
        int r = read_line(c, &line, &cap);
        if (r == 1) break;
        if (r == 2 || !line[0]) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            clear_conversation(c);
            fprintf(stderr, "[new conversation]\n");
            continue;
        }
        if (!strncmp(line, "/image ", 7)) {
            if (cli_vision_add(&c->vis, line + 7)) {
                fprintf(stderr, "bitspark chat: %s\n", bs_last_error());
            } else {
                c->n_pending++;
                fprintf(stderr, "[image %d attached to the next message]\n", c->vis.n);
            }
            continue;
        }
        size_t bad;
        if (!bs_utf8_valid(line, strlen(line), &bad)) {
            fprintf(stderr, "bitspark chat: the message is not valid UTF-8 (bad byte 0x%02x at "
                            "offset %zu)\n", (unsigned char)line[bad], bad);
            continue;
        }
        char *msg = cli_vision_prefix(c->n_pending, line);
        push_msg(c, "user", msg, NULL);
        free(msg);
        const int attached = c->n_pending;
        c->n_pending = 0;
        interrupted = 0;
        if (reply(c)) {
            fprintf(stderr, "bitspark chat: %s\n", bs_last_error());
            pop_msg(c);   /* the message that failed is not part of the conversation */
            cli_vision_truncate(&c->vis, c->vis.n - attached);   /* nor its images */
        }
    }
    free(line);
}

int cmd_chat(int argc, char **argv) {
    chat c = {0};
    if (parse(&c.o, &c.vis, argc, argv)) return cli_fail("chat");
    c.o.g.undo = true;   /* rollback may serve the next turn's prefix */
    cli_gen_cap_ctx(&c.o.g);
    if (bs_engine_open(&c.e, &c.o.g)) return cli_fail("chat");
    if (cli_vision_open(&c.vis, c.e.model, c.o.g.n_threads)) {
        cli_vision_close(&c.vis);
        bs_engine_close(&c.e);
        return cli_fail("chat");
    }
    c.tty_in = isatty(STDIN_FILENO);
    c.tty_out = isatty(STDOUT_FILENO);
    if (c.o.system) push_msg(&c, "system", c.o.system, NULL);
    c.n_pending = c.vis.n;   /* --image: with the first message */
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint;   /* no SA_RESTART: Ctrl-C at the prompt interrupts getline */
    sigemptyset(&sa.sa_mask);
    struct sigaction old;
    sigaction(SIGINT, &sa, &old);
    if (c.tty_in)
        fprintf(stderr, "bitspark chat: %s. Ctrl-C stops a reply, Ctrl-D or /exit quits, "
                        "/reset starts over.\n", c.o.g.model);
    chat_loop(&c);
    sigaction(SIGINT, &old, NULL);
    while (c.n_msgs) pop_msg(&c);
    free(c.msgs);
    free(c.reason);
    free(c.content);
    cli_vision_close(&c.vis);
    bs_engine_close(&c.e);
    return 0;
}
