/* test_server_tools.c: <tool_call> blocks in model output -> OpenAI tool_calls (server_calls.c,
 * server_tools.c): the Qwen3.5 XML form with typed and multi-line parameters, string parameters
 * by the tool's schema, the Qwen3 JSON form, several calls, text around them kept as content,
 * broken blocks left in the content, a call cut by the end closed; arguments as the model wrote
 * them (compacted: numbers never printed back from doubles), a key given twice keeping its first
 * value. Then the reader fed in pieces of every size and at every split says exactly what it says
 * fed the whole text, and a string parameter streams before its value ends. */
#include "server/server.h"
#include "server/server_dialect.h"
#include "test.h"
#include "io/util.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* get_weather's city and f's text, n (nullable) and z (anyOf string, null) are strings by their
 * schemas; f's i (string or integer) is not */
static const char *const TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"properties\":{\"text\":{\"type\":[\"string\"]},"
    "\"n\":{\"type\":[\"string\",\"null\"]},\"z\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]},"
    "\"i\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}}}}}]";

static char *str_params;

static void check_cut(const char *out, int n_want, const char *rest_want, const char *name0, const char *args0, bool cut_want) {
    srv_tool_call *c = NULL;
    srv_buf rest = {0};
    bool cut = false;
    int n = srv_parse_tool_calls(out, strlen(out), str_params, false, &c, &rest, &cut);
    CHECK_EQ_INT(n, n_want);
    CHECK_STR(rest.p, rest_want);
    CHECK(cut == cut_want);
    if (n > 0 && name0) {
        CHECK_STR(c[0].name, name0);
        CHECK_STR(c[0].arguments, args0);
    }
    srv_free_tool_calls(c, n);
    srv_buf_free(&rest);
}

static void check(const char *out, int n_want, const char *rest_want, const char *name0, const char *args0) {
    check_cut(out, n_want, rest_want, name0, args0, false);
}

/* ---- the reader's events as one string: text, calls' openings and arguments, each run joined ---- */

typedef struct event_log { srv_buf s; int last; } event_log;

static void log_kind(event_log *l, int kind, const char *tag) {
    if (l->last != kind) srv_buf_adds(&l->s, tag);
    l->last = kind;
}
static void l_text(void *ud, const char *p, size_t n) { log_kind(ud, 1, "[T]"), srv_buf_add(&((event_log *)ud)->s, p, n); }
static void l_open(void *ud, int i, const char *name) {
    char b[300];
    snprintf(b, sizeof b, "[OPEN %d %s]", i, name);
    ((event_log *)ud)->last = 2;
    srv_buf_adds(&((event_log *)ud)->s, b);
}
static void l_args(void *ud, int i, const char *p, size_t n) { (void)i, log_kind(ud, 3, "[A]"), srv_buf_add(&((event_log *)ud)->s, p, n); }
static void l_close(void *ud, int i) {
    char b[32];
    snprintf(b, sizeof b, "[CLOSE %d]", i);
    ((event_log *)ud)->last = 4;
    srv_buf_adds(&((event_log *)ud)->s, b);
}
static const srv_calls_ops log_ops = {l_text, l_open, l_args, l_close};

/* out fed in pieces of `step` bytes (0: whole), or split once at `at` (step < 0) */
static char *feed_log(const char *out, int step, size_t at, bool *cut) {
    event_log l = {{0}, 0};
    srv_calls c;
    srv_calls_init(&c, str_params, false);
    const size_t n = strlen(out);
    if (step > 0) {
        for (size_t i = 0; i < n; i += (size_t)step) srv_calls_feed(&c, out + i, BS_MIN((size_t)step, n - i), false, &log_ops, &l);
        srv_calls_feed(&c, NULL, 0, true, &log_ops, &l);
    } else if (step < 0) {
        srv_calls_feed(&c, out, at, false, &log_ops, &l);
        srv_calls_feed(&c, out + at, n - at, true, &log_ops, &l);
    } else {
        srv_calls_feed(&c, out, n, true, &log_ops, &l);
    }
    *cut = c.n_calls && c.cut;
    srv_calls_free(&c);
    srv_buf_adds(&l.s, "");
    return l.s.p;
}

static void check_pieces(const char *out) {
    bool cut0, cut;
    char *whole = feed_log(out, 0, 0, &cut0);
    int bad = 0;
    for (int step = 1; step <= 13 && !bad; step++) {
        char *t = feed_log(out, step, 0, &cut);
        bad += strcmp(t, whole) != 0 || cut != cut0;
        if (bad) fprintf(stderr, "  in pieces of %d:\n  %s\n  whole:\n  %s\n", step, t, whole);
        free(t);
    }
    for (size_t at = 0; at <= strlen(out) && !bad; at++) {
        char *t = feed_log(out, -1, at, &cut);
        bad += strcmp(t, whole) != 0 || cut != cut0;
        if (bad) fprintf(stderr, "  split at %zu:\n  %s\n  whole:\n  %s\n", at, t, whole);
        free(t);
    }
    CHECK(!bad);
    free(whole);
}

/* Arguments seen before the text is complete: what a stream has sent after `part`. */
static void check_streams(const char *part, const char *log_want) {
    event_log l = {{0}, 0};
    srv_calls c;
    srv_calls_init(&c, str_params, false);
    srv_calls_feed(&c, part, strlen(part), false, &log_ops, &l);
    srv_buf_adds(&l.s, "");
    CHECK_STR(l.s.p, log_want);
    srv_calls_free(&c);
    srv_buf_free(&l.s);
}

/* ---- the blocks of other APIs' answers (server_blocks.c): the same in pieces as whole ---- */

static void b_open(void *ud, int kind, const srv_tool_call *call) {
    char b[300];
    snprintf(b, sizeof b, "[O%d %s]", kind, call ? call->name : "");
    srv_buf_adds(ud, b);
}
static void b_delta(void *ud, int kind, const char *p, size_t n) { (void)kind, srv_buf_add(ud, p, n); }
static void b_close(void *ud, int kind) {
    char b[16];
    snprintf(b, sizeof b, "[C%d]", kind);
    srv_buf_adds(ud, b);
}
static const srv_block_ops block_ops = {b_open, b_delta, b_close};

static bool one_call;   /* blocks: the first call only (parallel calls off) */

static char *blocks_log(const char *out, size_t step, int *n_calls) {
    srv_buf l = {0};
    srv_blocks bl;
    srv_blocks_init(&bl, false, true, str_params, one_call);
    const size_t n = strlen(out);
    for (size_t i = 0; i < n; i += step) srv_blocks_feed(&bl, out + i, BS_MIN(step, n - i), false, &block_ops, &l);
    srv_blocks_feed(&bl, NULL, 0, true, &block_ops, &l);
    *n_calls = bl.n_calls;
    srv_blocks_free(&bl);
    srv_buf_adds(&l, "");
    return l.p;
}

static void check_blocks(const char *out, const char *want, int calls_want) {
    int n0, n;
    char *whole = blocks_log(out, strlen(out) + 1, &n0);
    CHECK_STR(whole, want);
    CHECK_EQ_INT(n0, calls_want);
    for (size_t step = 1; step <= 7; step++) {
        char *t = blocks_log(out, step, &n);
        CHECK_STR(t, whole);
        CHECK_EQ_INT(n, n0);
        free(t);
    }
    free(whole);
}

static const char *const SAMPLES[] = {
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
    "Let me look.\n\n<tool_call>\n<function=f>\n<parameter=n>\n3\n</parameter>\n<parameter=ok>\ntrue\n</parameter>\n"
    "<parameter=text>\nline one\nline two\n</parameter>\n</function>\n</tool_call>\n\nDone.",
    "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n<function=a>\n</function>\n</tool_call>",
    "broken <tool_call>\n<function=\n</tool_call> tail <tool_call>{\"arguments\": 5}</tool_call> <tool_call> x",
    "unclosed <tool_call>\n<function=get_weather>\n<parameter=city>\nSan Fr",
    "<tool_call>\n<function=f>\n<parameter=text>\ncaf\xc3\xa9 \xe2\x82\xac \"q\" \\ </param a</parameter\n\n</parameter>\n"
    "<parameter=text>\nsecond\n</parameter>\n<parameter=x>\n{\"a\": [1, 2]}\n</parameter>\n</function>",
    "a < b <tool_call <tool_call>\n<function=get_weather>junk<parameter=days>\n5</parameter>trail</tool_call>\n  \n",
    "text only, with tools\n\n",
    "<tool_call>\n<function=f>\n<parameter=text>\n\xe2\x82",
};

int main(void) {
    json_t *tools = json_loads(TOOLS, 0, NULL);
    str_params = srv_tool_string_params(tools);
    json_decref(tools);
    CHECK_STR(str_params, "\nget_weather\x1f" "city\n\nf\x1ftext\n\nf\x1fn\n\nf\x1fz\n");

    check("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
          1, "", "get_weather", "{\"city\":\"Paris\"}");
    /* a string parameter stays a string where its text reads as JSON; others keep their JSON type */
    check("<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
          "</function>\n</tool_call>", 1, "", "get_weather", "{\"city\":\"42\",\"days\":3}");
    check("Let me look.\n\n<tool_call>\n<function=f>\n<parameter=k>\n3\n</parameter>\n<parameter=ok>\ntrue\n"
          "</parameter>\n<parameter=text>\nline one\nline two\n</parameter>\n<parameter=o>\n{\"a\": [1, 2]}\n"
          "</parameter>\n</function>\n</tool_call>",
          1, "Let me look.", "f", "{\"k\":3,\"ok\":true,\"text\":\"line one\\nline two\",\"o\":{\"a\":[1,2]}}");
    /* nullable strings are strings; a string-or-integer parameter keeps the JSON type */
    check("<tool_call>\n<function=f>\n<parameter=n>\n90210\n</parameter>\n<parameter=z>\n7\n</parameter>\n"
          "<parameter=i>\n7\n</parameter>\n</function>\n</tool_call>", 1, "", "f", "{\"n\":\"90210\",\"z\":\"7\",\"i\":7}");
    check("<tool_call>\n{\"name\": \"g\", \"arguments\": {\"x\": 1}}\n</tool_call>", 1, "", "g", "{\"x\":1}");
    check("<tool_call>\n<function=a>\n</function>\n</tool_call>\n<tool_call>\n<function=b>\n<parameter=k>\nv\n"
          "</parameter>\n</function>\n</tool_call>", 2, "", "a", "{}");
    check("no calls here", 0, "no calls here", NULL, NULL);
    check("no calls, trailing blanks kept \n", 0, "no calls, trailing blanks kept \n", NULL, NULL);
    check("broken <tool_call>\n<function=\n</tool_call> tail", 0, "broken <tool_call>\n<function=\n</tool_call> tail", NULL, NULL);
    check("<tool_call>\n{\"arguments\": 5}\n</tool_call>", 0, "<tool_call>\n{\"arguments\": 5}\n</tool_call>", NULL, NULL);
    /* arguments written as a string hold an object's text, else no call; a name is not empty */
    check("<tool_call>\n{\"name\": \"g\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>", 1, "", "g", "{\"x\":1}");
    check("<tool_call>{\"name\":\"f\",\"arguments\":\"hello\"}</tool_call>", 0, "<tool_call>{\"name\":\"f\",\"arguments\":\"hello\"}</tool_call>",
          NULL, NULL);
    check("<tool_call>{\"name\":\"\",\"arguments\":{}}</tool_call>", 0, "<tool_call>{\"name\":\"\",\"arguments\":{}}</tool_call>", NULL, NULL);
    /* the end inside a call's opening: the opening goes (a call cut short); a JSON-form call
     * without its </tool_call> that parses is a call */
    check("text <tool_call>\n{\"name\": \"g\"", 0, "text", NULL, NULL);
    check("text <tool_c", 0, "text", NULL, NULL);
    check("a <", 0, "a <", NULL, NULL);
    check("<tool_call>\n{\"name\": \"g\", \"arguments\": {}}", 1, "", "g", "{}");
    check_cut("Hi\n<tool_call>\n<function=f>\n</function>\n</tool_", 1, "Hi", "f", "{}", false);
    check_cut("<tool_call>\n<function=f>\n</function>\n</tool_call>\n<tool_call>\n<function=ge", 1, "", "f", "{}", true);
    check_cut("<tool_call>\n<function=f>\n</function>\n</tool_call>\n<tool_call>\n", 1, "", "f", "{}", true);
    /* a call cut by the end of the text is closed: its arguments so far */
    check_cut("unclosed <tool_call>\n<function=f>", 1, "unclosed", "f", "{}", true);
    check_cut("<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Fr", 1, "", "get_weather", "{\"city\":\"San Fr\"}", true);
    check_cut("<tool_call>\n<function=get_weather>\n<parameter=days>\n5", 1, "", "get_weather", "{}", true);
    check_cut("<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</para", 1, "", "get_weather", "{\"city\":\"Rome\"}", true);
    /* text around calls stays, the whitespace between them goes; a forgotten </function> is forgiven */
    check("A\n<tool_call>\n<function=a>\n</function>\n</tool_call>\n\nB <tool_call>\n<function=b>\n</tool_call>\n",
          2, "A\n\nB", "a", "{}");
    /* only the last 256 bytes of whitespace before a call are held (and dropped) */
    {
        char long_ws[700];
        memset(long_ws, '\n', 600);
        strcpy(long_ws + 600, "<tool_call>\n<function=a>\n</function>");
        srv_tool_call *c = NULL;
        srv_buf rest = {0};
        CHECK_EQ_INT(srv_parse_tool_calls(long_ws, strlen(long_ws), str_params, false, &c, &rest, NULL), 1);
        CHECK_EQ_INT((int)rest.len, 600 - 256);
        srv_free_tool_calls(c, 1);
        srv_buf_free(&rest);
    }
    /* arguments as the model wrote them, compacted: numbers are not printed back from doubles */
    check("<tool_call>\n<function=f>\n<parameter=x>\n9232.2\n</parameter>\n<parameter=y>\n6E+196\n</parameter>\n"
          "</function>\n</tool_call>", 1, "", "f", "{\"x\":9232.2,\"y\":6E+196}");
    check("<tool_call>\n{\"name\": \"g\", \"arguments\": {\"x\": 9232.2, \"s\": \"a \\\"b\\\" c\", \"l\": [ 1 , 2 ]}}\n</tool_call>",
          1, "", "g", "{\"x\":9232.2,\"s\":\"a \\\"b\\\" c\",\"l\":[1,2]}");
    check("<tool_call>\n{ \"arguments\" : {\"k\": {\"name\": 1}} , \"name\" : \"h\" }\n</tool_call>", 1, "", "h",
          "{\"k\":{\"name\":1}}");
    /* a key given twice keeps its first value (it may have been sent already) */
    check("<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n2\n</parameter>\n"
          "<parameter=a>\n3\n</parameter>\n</function>\n</tool_call>", 1, "", "f", "{\"a\":1,\"b\":2}");
    check("<tool_call>\n{\"name\": \"g\", \"arguments\": {\"a\": 1}, \"arguments\": {\"b\": 2}}\n</tool_call>", 1, "", "g",
          "{\"b\":2}");
    check("<tool_call>\n<function=f>\n<parameter=t>\ncaf\xc3\xa9 \"q\"\n</parameter>\n</function>\n</tool_call>", 1, "", "f",
          "{\"t\":\"caf\xc3\xa9 \\\"q\\\"\"}");
    {   /* a NUL in a JSON-form call: no call (jansson would read the text up to it) */
        static const char nul[] = "<tool_call>{\"name\": \"g\", \"arguments\": {\"x\": [0\0, 1]}}</tool_call>";
        srv_tool_call *c = NULL;
        srv_buf rest = {0};
        CHECK_EQ_INT(srv_parse_tool_calls(nul, sizeof nul - 1, str_params, false, &c, &rest, NULL), 0);
        CHECK_EQ_INT((int)rest.len, (int)sizeof nul - 1);
        srv_free_tool_calls(c, 0);
        srv_buf_free(&rest);
    }
    /* names go out as JSON strings: one that is not UTF-8 (or holds a NUL) is no name */
    check("<tool_call>\n<function=g\xf4\xf4>\n</function>\n</tool_call>", 0, "<tool_call>\n<function=g\xf4\xf4>\n</function>\n</tool_call>", NULL, NULL);
    check("<tool_call>\n<function=f>\n<parameter=k\xc3>\n1\n</parameter>\n<parameter=j>\n2\n</parameter>\n</function>\n</tool_call>", 1, "",
          "f", "{\"j\":2}");
    /* a value may hold the tags that end a call: only </parameter> ends it */
    check("<tool_call>\n<function=f>\n<parameter=text>\n</function></tool_call>\n</parameter>\n</function>\n</tool_call>", 1, "",
          "f", "{\"text\":\"</function></tool_call>\"}");

    for (size_t i = 0; i < sizeof SAMPLES / sizeof *SAMPLES; i++) check_pieces(SAMPLES[i]);

    /* a string parameter streams as it comes; the newline that may precede </parameter> waits */
    check_streams("Look: <tool_call>\n<function=get_weather>\n<parameter=city>\nSan Fran\n",
                  "[T]Look:[OPEN 0 get_weather][A]{\"city\":\"San Fran");
    check_streams("<tool_call>\n<function=get_weather>\n<parameter=city>\nA\"\\\n</param",
                  "[OPEN 0 get_weather][A]{\"city\":\"A\\\"\\\\");
    /* another value comes whole; text that may open a call waits */
    check_streams("<tool_call>\n<function=get_weather>\n<parameter=days>\n12", "[OPEN 0 get_weather]");
    check_streams("Hi <tool_", "[T]Hi");
    /* thinking, text, then each call as a block of its own; the same fed in pieces */
    check_blocks("<think>\nhm\n</think>\n\nSure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
                 "</function>\n</tool_call>\n<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>",
                 "[O0 ]hm[C0][O1 ]Sure.[C1][O2 get_weather]{\"city\":\"Oslo\"}[C2][O2 noop]{}[C2]", 2);
    one_call = true;   /* disable_parallel_tool_use, parallel_tool_calls false: the first call alone */
    check_blocks("<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>\n"
                 "<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>",
                 "[O2 get_weather]{\"city\":\"Oslo\"}[C2]", 1);
    one_call = false;
    check_blocks("plain text", "[O1 ]plain text[C1]", 0);
    check_blocks("", "[O1 ][C1]", 0);
    free(str_params);
    return test_summary("test_server_tools");
}
