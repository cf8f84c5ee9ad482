#!/usr/bin/env python3
"""JSON schema string patterns as grammars against Python's re (an independent regex engine):
for each pattern, random strings over the characters it names (and a few others: a quote, a
backslash, controls, non-ASCII) plus strings built to match, must be accepted by the grammar of
{"type": "string", "pattern": p} (their JSON text) exactly when re.search finds the pattern in
them. The patterns keep to what ECMAScript and Python read alike (re.ASCII: \\d \\w \\s are
ASCII there as in ECMAScript for these strings; $ is \\Z, ECMAScript's end; no \\r in the strings,
which ECMAScript's . excludes and Python's takes). The grammars come from test_grammar_values
in its oracle mode (a file of [pattern, string] lines)."""
import json
import os
import random
import re
import subprocess
import sys
import tempfile

PATTERNS = [
    ('^abc$', ['abc']), ('abc', ['xabcx']), ('^ab*c$', ['ac', 'abbbc']), ('^a+b?$', ['a', 'aab']),
    ('^(ab|cd)*$', ['', 'abcd']), ('^a{2,4}$', ['aa', 'aaaa']), ('^a{3}b{1,}$', ['aaab']),
    ('x{2,}y', ['zxxy']), ('^[a-c]+$', ['abc']), ('^[^a-c]*$', ['xyz', '']), ('^\\d{2}-\\d{2}$', ['12-34']),
    ('^\\w+@\\w+\\.com$', ['a_1@b.com']), ('\\s\\S', [' a']), ('^\\D\\W$', ['a-']),
    ('^a.c$', ['abc', 'a"c', 'a\\c', 'a\x01c']), ('^"[^"]*"$', ['"x"', '""']), ('^\\\\+$', ['\\\\']),
    ('^[\\\\"]{2}$', ['\\"', '""']), ('^\\t?\\n$', ['\n', '\t\n']), ('^[\\x00-\\x08]+$', ['\x00\x08']),
    ('^[^\\x20-\\x7e]+$', ['\x01\u00e9']), ('^(?:a|b)(?:c|d)?$', ['a', 'bd']), ('^((a|b)c){2}$', ['acbc']),
    ('^(a|bc|)d$', ['d', 'bcd']), ('^a|b$', ['ax', 'xb']), ('^(a|b)$|^c', ['a', 'cx']),
    ('^[-a]+$', ['-a-']), ('^[a-]+$', ['a-']), ('^[\\]\\-]+$', [']-']), ('^\\.\\*\\+\\?\\(\\)\\[\\{\\|\\^$', ['.*+?()[{|^']),
    ('^x{$', ['x{']), ('^\\u00e9+\\x41$', ['\u00e9A']), ('^[\u00e0-\u00ff]\u20ac$', ['\u00e9\u20ac']),
    ('^[\\d.]+$', ['1.5']), ('^[^\\d\\s]+$', ['ab']), ('^a*?b+?$', ['abb']), ('^(\\d{1,3}\\.){3}\\d{1,3}$', ['1.22.3.44']),
    ('^[0-9a-f]{4}-[0-9a-f]{2}$', ['ab12-0f']), ('^(a(b(c)?)?)?$', ['', 'ab', 'abc']), ('b$', ['ab', 'b']),
    ('^a{100,300}$', ['a' * 100, 'a' * 300]), ('^(ab){65}$', ['ab' * 65]), ('^b{70,}x$', ['b' * 70 + 'x', 'b' * 90 + 'x']),
    ('^[cd]{0,129}$', ['c' * 129, 'cd' * 10]),
    ('^(a?){2,5}$', ['aa', 'aaaaa', '']), ('^(a|){3}b$', ['b', 'aab']), ('^(a*b?){3}$', ['aab', '', 'bbb']),
    ('^(a?){200,300}c$', ['aaac', 'c']),
    ('^$', ['']), ('', ['anything']), ('^\\0$', ['\x00']), ('^[a\\0]+$', ['a\x00a']),
]


def py_pattern(p):
    # ECMAScript's $ (no m flag): the very end, which is Python's \Z
    return re.sub(r'(?<!\\)\$', r'\\Z', p)


def alphabet(p, examples):
    chars = set(c for e in examples for c in e)
    chars |= set(c for c in p if c not in '\\^$()[]{}|*+?.')
    chars |= set('az09 -_."\\\t\n\x01\u00e9')
    return sorted(chars)


def strings_for(p, examples, rng):
    out = list(examples)
    al = alphabet(p, examples)
    for _ in range(150):
        out.append(''.join(rng.choice(al) for _ in range(rng.randint(0, 7))))
    for e in examples:   # near misses: one character changed, dropped or added
        for _ in range(10):
            s = list(e)
            i = rng.randint(0, len(s))
            op = rng.randint(0, 2)
            if op == 0 and s and i < len(s):
                s[i] = rng.choice(al)
            elif op == 1 and s and i < len(s):
                del s[i]
            else:
                s.insert(i, rng.choice(al))
            out.append(''.join(s))
    return out


def main():
    build = os.environ.get('BS_BUILD', 'build')
    exe = os.path.join(build, 'tests', 'test_grammar_values')
    if not os.path.exists(exe):
        print('%s is not built' % exe)
        return 1
    rng = random.Random(7)
    cases = []
    for p, examples in PATTERNS:
        rx = re.compile(py_pattern(p), re.ASCII)
        for e in examples:
            assert rx.search(e), (p, e)   # the examples must match (a check of this list)
        for s in strings_for(p, examples, rng):
            cases.append((p, s, 1 if rx.search(s) else 0))
    with tempfile.NamedTemporaryFile('w', suffix='.jsonl', delete=False) as f:
        for p, s, _ in cases:
            f.write(json.dumps([p, s]) + '\n')
        path = f.name
    try:
        r = subprocess.run([exe, path], capture_output=True, text=True)
    finally:
        os.unlink(path)
    got = r.stdout.split()
    if r.returncode != 0 or len(got) != len(cases):
        print('oracle failed (exit %d, %d of %d answers): %s' % (r.returncode, len(got), len(cases), r.stderr[-500:]))
        return 1
    bad = [(p, s, w, g) for (p, s, w), g in zip(cases, got) if str(w) != g]
    for p, s, w, g in bad[:20]:
        print('/%s/ on %r: grammar %s, re %d' % (p, s, g, w))
    n_match = sum(w for _, _, w in cases)
    print('%d patterns, %d strings (%d matching): %d disagree with re' % (len(PATTERNS), len(cases), n_match, len(bad)))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
