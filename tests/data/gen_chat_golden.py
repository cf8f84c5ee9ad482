#!/usr/bin/env python3
"""Write tests/data/chat_golden.json: conversations rendered by the real Qwen3.5 chat template
with Jinja2, set up the way transformers renders chat templates (trim_blocks, lstrip_blocks,
tojson = json.dumps(ensure_ascii=False), raise_exception). test_chat_template.c renders the same
conversations with bitspark's native renderer and must match byte for byte.

    python3 tests/data/gen_chat_golden.py Qwen3.5-4B.jinja > tests/data/chat_golden.json

The template file is the one llama.cpp ships as models/templates/Qwen3.5-4B.jinja (the family
template stored in Qwen3.5 GGUFs); it is not kept in this repository. Two more shipped variants
are derived from it by the exact line edits that distinguish them: Qwen3.5-122B (a kept
assistant turn always gets a think block) and Qwen3.6-27B (preserve_thinking; scalar tool
arguments through tojson). Each variant's fingerprint (the template lines bitspark's detection
looks at) is stored too, so detection is tested on real template text."""
import json
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

KEEP_35 = "{%- if loop.index0 > ns.last_query_index  and reasoning_content %}"
KEEP_122 = "{%- if loop.index0 > ns.last_query_index %}"
KEEP_36 = "{%- if (preserve_thinking is defined and preserve_thinking is true) or (loop.index0 > ns.last_query_index) %}"
ARGS_35 = "{%- set args_value = args_value | tojson | safe if args_value is mapping or (args_value is sequence and args_value is not string) else args_value | string %}"
ARGS_36 = "{%- set args_value = args_value | string if args_value is string else args_value | tojson | safe %}"


def variants(base):
    assert KEEP_35 in base and ARGS_35 in base, "not the expected Qwen3.5 template"
    return {
        "qwen3.5-4b": base,
        "qwen3.5-122b": base.replace(KEEP_35, KEEP_122),
        "qwen3.6-27b": base.replace(KEEP_35, KEEP_36).replace(ARGS_35, ARGS_36),
    }


def fingerprint(tmpl):
    keys = ("<function=", "<tool_response>", "<think>", "preserve_thinking", "args_value |",
            "reasoning_content %}", "enable_thinking")
    return "\n".join(l for l in tmpl.split("\n") if any(k in l for k in keys))


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def raise_exception(msg):
        raise TemplateError(msg)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city — now",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                           "days": {"type": "integer", "minimum": 1, "maximum": 7.5}},
                          "required": ["city"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "description": "Search \"the web\"\n<b>",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}


def call(name, args):
    return {"name": name, "arguments": args}


def U(c):
    return {"role": "user", "content": c}


def A(c, reasoning=None, calls=None):
    m = {"role": "assistant", "content": c}
    if reasoning is not None:
        m["reasoning_content"] = reasoning
    if calls:
        m["tool_calls"] = calls
    return m


def S(c):
    return {"role": "system", "content": c}


def T(c):
    return {"role": "tool", "content": c}


CASES = [
    ("user only", [U("Hello!")], None, True, -1, False),
    ("user, thinking off", [U("Hello!")], None, True, 0, False),
    ("user, thinking on explicitly", [U("Hello!")], None, True, 1, False),
    ("no generation prompt", [U("Hi"), A("Hello.")], None, False, -1, False),
    ("system and user, trimmed", [S("  You are terse.\n\n"), U("\u3000 What is 2+2? \x1c\n")], None, True, -1, False),
    ("empty system", [S(""), U("x")], None, True, -1, False),
    ("null contents", [S(None), U(None)], None, True, -1, False),
    ("multi-turn reasoning field", [U("q1"), A("a1", reasoning="r1"), U("q2"), A("a2", reasoning="\n r2 \n")],
     None, True, -1, False),
    ("multi-turn inline think", [U("q1"), A("<think>\nold thoughts\n</think>\n\nold answer"), U("q2"),
                                  A("new thoughts\n</think>\n\nnew answer")], None, False, -1, False),
    ("inline think edge cases", [U("q"), A("a<think>x</think>b</think>\n\nc")], None, True, -1, False),
    ("empty reasoning after query", [U("q"), A("answer", reasoning="")], None, True, -1, False),
    ("no reasoning after query", [U("q"), A("answer")], None, True, -1, False),
    ("preserve thinking", [U("q1"), A("a1", reasoning="r1"), U("q2"), A("a2", reasoning="r2")], None, True, -1, True),
    ("preserve thinking, empty", [U("q1"), A("a1"), U("q2")], None, True, 0, True),
    ("tools, system, call, result, answer",
     [S("Be helpful."), U("Weather in Paris?"),
      A("", reasoning="I should call the tool.", calls=[call("get_weather", {"city": "Paris", "days": 3})]),
      T("{\"temp\": 21}"), A("It is 21 degrees.", reasoning="Done.")],
     [WEATHER, SEARCH], True, -1, False),
    ("tools without system", [U("Find cats")], [SEARCH], True, -1, False),
    ("tools, empty system", [S("  "), U("Find cats")], [SEARCH], True, 0, False),
    ("empty tools list", [S("sys"), U("hi")], [], True, -1, False),
    ("parallel calls and results",
     [U("Weather in Paris and Rome?"),
      A("Let me check both.", calls=[call("get_weather", {"city": "Paris"}), call("get_weather", {"city": "Rome"})]),
      T("sunny"), T("  rainy  "), U("<tool_response>\nextra\n</tool_response>")],
     [WEATHER], True, -1, False),
    ("argument types",
     [U("x"), A("", calls=[call("f", {"s": "two\nlines \"q\"", "i": 42, "neg": -7, "f": 1.5, "tiny": 0.0001,
                                      "big": 1e20, "whole": 3.0, "t": True, "no": False, "n": None,
                                      "list": [1, "a", None, 2.25], "obj": {"k": "v", "u": "é€🎉", "c": "\x01\t"},
                                      "empty": "", "uni": "東京"})])],
     None, True, -1, False),
    ("call without arguments", [U("x"), A("ok", calls=[{"name": "ping"}])], None, True, -1, False),
    ("tool message first", [T("orphan"), U("q")], None, True, -1, False),
    ("assistant first", [A("I start."), U("q")], None, True, -1, False),
    ("unicode whitespace trim", [U("\u00a0\u2003text\u2028\u0085"), A("\ttab\t", reasoning="\u3000r\u3000")],
     None, True, -1, False),
    ("no user query", [S("s"), A("a")], None, True, -1, False),
    ("only tool responses", [U("<tool_response>\nx\n</tool_response>")], None, True, -1, False),
    ("system not first", [U("q"), S("late")], None, True, -1, False),
    ("unknown role", [U("q"), {"role": "developer", "content": "x"}], None, True, -1, False),
    ("no messages", [], None, True, -1, False),
]


def main():
    base = open(sys.argv[1], encoding="utf-8").read()
    if base.endswith("\n"):
        base = base[:-1]
    env = make_env()
    tmpls = {k: env.from_string(v) for k, v in variants(base).items()}
    out = {"variants": {k: fingerprint(v) for k, v in variants(base).items()}, "cases": []}
    for name, msgs, tools, gen, think, preserve in CASES:
        kw = {"messages": msgs, "tools": tools, "add_generation_prompt": gen}
        if think >= 0:
            kw["enable_thinking"] = bool(think)
        if preserve:
            kw["preserve_thinking"] = True
        expected = {}
        for vname, t in tmpls.items():
            try:
                expected[vname] = {"text": t.render(**kw)}
            except TemplateError as e:
                expected[vname] = {"error": str(e)}
        cmsgs = []
        for m in msgs:
            c = {"role": m["role"], "content": m.get("content")}
            if "reasoning_content" in m:
                c["reasoning"] = m["reasoning_content"]
            if "tool_calls" in m:
                c["tool_calls"] = [{"name": tc["name"], "arguments": json.dumps(tc["arguments"], ensure_ascii=False)
                                    if "arguments" in tc else None} for tc in m["tool_calls"]]
            cmsgs.append(c)
        out["cases"].append({"name": name, "messages": cmsgs,
                             "tools": json.dumps(tools, ensure_ascii=False) if tools is not None else None,
                             "add_generation_prompt": gen, "enable_thinking": think,
                             "preserve_thinking": preserve, "expected": expected})
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
