/* cli_chat.c: `bitspark chat`: interactive multi-turn chat in the terminal.
 *
 * Each turn re-renders the whole conversation through the chat template (the template decides
 * what earlier turns look like, e.g. Qwen3.5 drops their reasoning), tokenizes it, and reuses
 * what the session already holds: the longest common prefix stays, and since the recurrent state
 * cannot be cut at an arbitrary point, the state is saved where the history ends and the
 * generation prompt begins; the next turn diverges after that point (the reply is re-rendered)
 * and restarts from the saved state instead of from scratch.
 *
 * Ctrl-C stops the current reply (a SIGINT handler sets a flag the generation loop polls);
 * Ctrl-D (EOF) or /exit quits; /reset clears the conversation. Reasoning is shown dimmed on a
 * terminal and between <think> tags otherwise. */
#include "cli.h"
#include "cli_gen.h"
#include "reasoning.h"
#include "utf8.h"
#include "util.h"

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
    cli_gen_opts g;
    const char *system;
    int n_predict;
    bool no_think, stats, no_reuse;
} chat_opts;

typedef struct {
    cli_gen g;
    chat_opts o;
    turn *msgs;
    int n_msgs, cap_msgs;
    int32_t *seq;              /* the tokens the session holds */
    size_t n_seq, cap_seq;
    void *snap;                /* session state after snap_n tokens (snap_n < 0: none) */
    size_t cap_snap, snap_len;
    long snap_n;
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
           "\n"
           "  -sys, --system TEXT     system message\n"
           "  --no-think              thinking off (the template's enable_thinking=false form)\n"
           "  -n, --n-predict N       max tokens per reply, -1 = until end of generation (-1)\n"
           "  --stats                 timings after each reply (stderr)\n"
           "  --no-reuse              re-evaluate the whole conversation every turn (for checks)\n");
    cli_gen_help();
}

static int parse(chat_opts *o, int argc, char **argv) {
    cli_gen_defaults(&o->g);
    o->n_predict = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_gen_parse(&o->g, argc, argv, &i);
        if (r < 0) return -1;
        if (r > 0) continue;
        long x;
        if (!strcmp(a, "-sys") || !strcmp(a, "--system")) {
            if (!(o->system = cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            const char *v = cli_value(argc, argv, &i);
            if (!v || cli_parse_int(a, v, -1, INT32_MAX, &x)) return -1;
            o->n_predict = (int)x;
        } else if (!strcmp(a, "--no-think")) {
            o->no_think = true;
        } else if (!strcmp(a, "--stats")) {
            o->stats = true;
        } else if (!strcmp(a, "--no-reuse")) {
            o->no_reuse = true;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            bs_log_level = 0;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            bs_log_level = 2;
        } else {
            return bs_error("unknown option '%s' (see bitspark help chat)", a);
        }
    }
    if (!o->g.model) return bs_error("no model given (-m FILE)");
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
    if (c->o.system) push_msg(c, "system", c->o.system, NULL);
    bs_session_reset(c->g.sess);
    bs_sampler_truncate(c->g.smp, 0);
    c->n_seq = 0;
    c->snap_n = -1;
}

/* Render and tokenize the conversation, with or without the generation prompt. */
static int render_tokens(chat *c, bool gen_prompt, int32_t **ids, size_t *n, bool *in_think) {
    bs_chat_msg *m = bs_xcalloc((size_t)c->n_msgs, sizeof *m);
    for (int i = 0; i < c->n_msgs; i++)
        m[i] = (bs_chat_msg){.role = c->msgs[i].role, .content = c->msgs[i].content,
                             .reasoning = c->msgs[i].reasoning};
    size_t len;
    char *text = cli_gen_render(&c->g, m, c->n_msgs, c->o.no_think ? 0 : -1, gen_prompt, &len);
    free(m);
    if (!text) return -1;
    static const char open[] = "<think>\n";
    if (in_think)
        *in_think = len >= sizeof open - 1 && !memcmp(text + len - (sizeof open - 1), open, sizeof open - 1);
    if (gen_prompt) bs_log(2, "prompt:\n%s\n", text);
    int rc = cli_gen_tokenize(&c->g, text, len, ids, n);
    free(text);
    return rc;
}

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* Bring the session to a prefix of toks (returns its length): keep what it holds if that is a
 * prefix, else restore the saved state, else roll back, else start over. */
static size_t reuse_prefix(chat *c, const int32_t *toks, size_t n) {
    bs_session *s = c->g.sess;
    size_t common = common_prefix(c->seq, c->n_seq, toks, n);
    size_t start = 0;
    if (c->o.no_reuse) {
        bs_session_reset(s);
    } else if (common == c->n_seq && common < n) {
        start = common;
    } else if (c->snap_n >= 0 && (size_t)c->snap_n <= common && (size_t)c->snap_n < n &&
               bs_session_state_load(s, c->snap, c->snap_len) == 0) {
        start = (size_t)c->snap_n;
    } else if (common < n && common > 0 && bs_session_rollback(s, (int)common) == 0) {
        start = common;
    } else {
        bs_session_reset(s);
    }
    bs_sampler_truncate(c->g.smp, start);
    c->n_seq = start;
    bs_log(2, "reusing %zu of %zu prompt tokens\n", start, n);
    return start;
}

static void set_seq(chat *c, const int32_t *toks, size_t n) {
    if (n > c->cap_seq) {
        c->cap_seq = n + n / 2 + 64;
        c->seq = bs_xrealloc(c->seq, c->cap_seq * sizeof *c->seq);
    }
    memcpy(c->seq, toks, n * sizeof *toks);
    c->n_seq = n;
}

static void save_snapshot(chat *c, size_t at) {
    size_t need = bs_session_state_size(c->g.sess);
    if (need > c->cap_snap) {
        free(c->snap);
        c->snap = bs_xmalloc(need);
        c->cap_snap = need;
    }
    c->snap_n = bs_session_state_save(c->g.sess, c->snap, c->cap_snap) == 0 ? (long)at : -1;
    c->snap_len = need;
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

static void emit(void *ud, int32_t id, const char *text, size_t len) {
    (void)id;
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
    if (render_tokens(c, false, &hist, &n_hist, NULL) ||
        render_tokens(c, true, &full, &n_full, &in_think))
        goto done;
    if (n_full >= (size_t)bs_session_n_ctx(c->g.sess)) {
        bs_error("the conversation is %zu tokens but the context holds %d (/reset or --ctx)",
                 n_full, bs_session_n_ctx(c->g.sess));
        goto done;
    }
    size_t split = common_prefix(hist, n_hist, full, n_full);   /* where the reply begins */
    size_t start = reuse_prefix(c, full, n_full);
    double t0 = bs_time();
    size_t n_hist_eval = 0;
    if (split > start) {   /* evaluate the history, keep that state for the next turn */
        if (cli_gen_feed(&c->g, full + start, (int)(split - start))) goto done;
        n_hist_eval = split - start;
        start = split;
        save_snapshot(c, split);
    }
    double t_hist = bs_time() - t0;
    set_seq(c, full, start);
    cli_gen_stats st;
    if (cli_gen_prompt(&c->g, full + start, (int)(n_full - start), &st)) goto done;
    st.t_prompt += t_hist;
    st.n_prompt += (int)n_hist_eval;
    set_seq(c, full, n_full);
    c->rs = bs_reasoning_new(in_think);
    c->n_reason = c->n_content = 0;
    c->showing_reasoning = false;
    cli_gen_run r = {.n_predict = c->o.n_predict, .ignore_eos = c->o.g.ignore_eos,
                     .interrupt = &interrupted, .emit = emit, .ud = c};
    int e = cli_gen_loop(&c->g, &r, &st);
    bs_reasoning_out out;
    bs_reasoning_finish(c->rs, &out);
    show(c, &out);
    bs_reasoning_free(c->rs);
    c->rs = NULL;
    if (c->showing_reasoning) fputs(c->tty_out ? "\x1b[0m" : "\n</think>", stdout);
    fputs("\n", stdout);
    fflush(stdout);
    /* the session holds the prompt and the generated tokens it evaluated */
    size_t kept = (size_t)bs_session_n_past(c->g.sess) - n_full;
    for (size_t i = 0; i < kept && i < (size_t)st.n_gen; i++) {
        if (c->n_seq == c->cap_seq) c->seq = bs_xrealloc(c->seq, (c->cap_seq *= 2) * sizeof *c->seq);
        c->seq[c->n_seq++] = st.tokens[i];
    }
    free(st.tokens);
    if (e) goto done;
    push_msg(c, "assistant", c->content ? c->content : "", c->reason ? c->reason : "");
    if (st.stop == GEN_STOP_INTERRUPT) fprintf(stderr, "[interrupted]\n");
    if (st.stop == GEN_STOP_CTX) fprintf(stderr, "[context full: /reset to start over]\n");
    if (c->o.stats) cli_gen_print_stats(&c->g, &st);
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
        size_t bad;
        if (!bs_utf8_valid(line, strlen(line), &bad)) {
            fprintf(stderr, "bitspark chat: the message is not valid UTF-8 (bad byte 0x%02x at "
                            "offset %zu)\n", (unsigned char)line[bad], bad);
            continue;
        }
        push_msg(c, "user", line, NULL);
        interrupted = 0;
        if (reply(c)) {
            fprintf(stderr, "bitspark chat: %s\n", bs_last_error());
            pop_msg(c);   /* the message that failed is not part of the conversation */
        }
    }
    free(line);
}

int cmd_chat(int argc, char **argv) {
    chat c = {0};
    if (parse(&c.o, argc, argv)) return cli_fail("chat");
    if (cli_gen_open(&c.g, &c.o.g)) return cli_fail("chat");
    c.tty_in = isatty(STDIN_FILENO);
    c.tty_out = isatty(STDOUT_FILENO);
    c.snap_n = -1;
    clear_conversation(&c);
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
    free(c.seq);
    free(c.snap);
    free(c.reason);
    free(c.content);
    cli_gen_close(&c.g);
    return 0;
}
