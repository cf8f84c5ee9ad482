/* test_server_tools.c: <tool_call> blocks in model output -> OpenAI tool_calls (server_tools.c):
 * the Qwen3.5 XML form with typed and multi-line parameters, the Qwen3 JSON form, several calls,
 * text around them kept as content, broken blocks left in the content; arguments as the model
 * wrote them (compacted: numbers never printed back from doubles), a key given twice keeping its
 * first place and last value. */
#include "server/server.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static void check(const char *out, int n_want, const char *rest_want, const char *name0, const char *args0) {
    srv_tool_call *c = NULL;
    char *rest = NULL;
    int n = srv_parse_tool_calls(out, &c, &rest);
    CHECK_EQ_INT(n, n_want);
    CHECK_STR(rest, rest_want);
    if (n > 0 && name0) {
        CHECK_STR(c[0].name, name0);
        CHECK_STR(c[0].arguments, args0);
    }
    srv_free_tool_calls(c, n);
    free(rest);
}

int main(void) {
    check("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
          1, "", "get_weather", "{\"city\":\"Paris\"}");
    check("Let me look.\n\n<tool_call>\n<function=f>\n<parameter=n>\n3\n</parameter>\n<parameter=ok>\ntrue\n"
          "</parameter>\n<parameter=text>\nline one\nline two\n</parameter>\n<parameter=o>\n{\"a\": [1, 2]}\n"
          "</parameter>\n</function>\n</tool_call>",
          1, "Let me look.", "f", "{\"n\":3,\"ok\":true,\"text\":\"line one\\nline two\",\"o\":{\"a\":[1,2]}}");
    check("<tool_call>\n{\"name\": \"g\", \"arguments\": {\"x\": 1}}\n</tool_call>", 1, "", "g", "{\"x\":1}");
    check("<tool_call>\n<function=a>\n</function>\n</tool_call>\n<tool_call>\n<function=b>\n<parameter=k>\nv\n"
          "</parameter>\n</function>\n</tool_call>", 2, "", "a", "{}");
    check("no calls here", 0, "no calls here", NULL, NULL);
    check("broken <tool_call>\n<function=\n</tool_call> tail", 0, "broken <tool_call>\n<function=\n</tool_call> tail", NULL, NULL);
    check("unclosed <tool_call>\n<function=f>", 0, "unclosed <tool_call>\n<function=f>", NULL, NULL);
    check("<tool_call>\n{\"arguments\": 5}\n</tool_call>", 0, "<tool_call>\n{\"arguments\": 5}\n</tool_call>", NULL, NULL);
    /* arguments as the model wrote them, compacted: numbers are not printed back from doubles */
    check("<tool_call>\n<function=f>\n<parameter=x>\n9232.2\n</parameter>\n<parameter=y>\n6E+196\n</parameter>\n"
          "</function>\n</tool_call>", 1, "", "f", "{\"x\":9232.2,\"y\":6E+196}");
    check("<tool_call>\n{\"name\": \"g\", \"arguments\": {\"x\": 9232.2, \"s\": \"a \\\"b\\\" c\", \"l\": [ 1 , 2 ]}}\n</tool_call>",
          1, "", "g", "{\"x\":9232.2,\"s\":\"a \\\"b\\\" c\",\"l\":[1,2]}");
    check("<tool_call>\n{ \"arguments\" : {\"k\": {\"name\": 1}} , \"name\" : \"h\" }\n</tool_call>", 1, "", "h",
          "{\"k\":{\"name\":1}}");
    /* a key given twice: its first place, its last value (as a parsed object has it) */
    check("<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n2\n</parameter>\n"
          "<parameter=a>\n3\n</parameter>\n</function>\n</tool_call>", 1, "", "f", "{\"a\":3,\"b\":2}");
    check("<tool_call>\n{\"name\": \"g\", \"arguments\": {\"a\": 1}, \"arguments\": {\"b\": 2}}\n</tool_call>", 1, "", "g",
          "{\"b\":2}");
    check("<tool_call>\n<function=f>\n<parameter=t>\ncaf\xc3\xa9 \"q\"\n</parameter>\n</function>\n</tool_call>", 1, "", "f",
          "{\"t\":\"caf\xc3\xa9 \\\"q\\\"\"}");
    return test_summary("test_server_tools");
}
