#!/usr/bin/env python3
"""Write tests/data/pretokenize_golden.json: strings and their pre-tokenizer splits computed by
Python's `regex` module from the original (HF tokenizer.json) regexes. test_tokenizer.c checks
bitspark's hand-written scanners against them. Run by hand with a python3 that has `regex`:

    python3 tests/data/gen_pretokenize_golden.py > tests/data/pretokenize_golden.json

Random strings draw only from code points whose class (letter / mark / number / space / other)
is the same in Python's unicodedata, the `regex` module and Unicode 15 (utf8proc), so the file
checks the scanning logic, not Unicode versions. U+017F and ligatures are left out: `regex`
case-folds them into 's' for (?i:'s), llama.cpp does not."""
import json
import random
import sys
import unicodedata

import regex

PATTERNS = {
    "qwen35": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    # llama.cpp's default: a cascade, each regex cutting the pieces of the previous one
    "default": [r"[\p{P}\$\+<=>\^~\|]+",
                r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
                r"\p{N}+", r"[0-9][0-9][0-9]"],
}

WHITE_SPACE = {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F,
               0x205F, 0x3000} | set(range(0x2000, 0x200B))

HAND = [
    "Hello world", " Hello world", "Hello, world!", "\n\n", "333333", "3.14159 and 12345678",
    "def main():\n    print(\"hi\")\n    return 0", "Ünïcödé façade naïve café",
    "e\u0301te\u0301 cafe\u0301 n\u0303", "\u0915\u093f\u0924\u093e\u092c", "\u0e01\u0e31\u0e19",
    "  leading spaces and trailing   ", "tabs\tand\tnewlines\n\nend", "a  b", "a   b", "a \n b",
    " \n\n \n x", "x \r\n\r\n  y", "!!!\n\n", " !!\n", "\u00a0\u00a0x", "\u3000\u6771\u4eac",
    "don't won't I'm we'll they've she'd it's", "DON'T I'M WE'LL THEY'VE", "'s'S'll'LL'x",
    "''s", " 's", "x'", "'", "1'st", "\u0660\u0661\u0662", "\u2167\u2168", "\u00bd\u00be",
    "emoji \U0001F389\U0001F680 mixed", "\U0001F468\u200d\U0001F469", "\u200d\u200d", "a\u200db",
    "\u0301\u0301abc", " \u0301", "\n\u0301", "1\u0301", "\t\t!", "  !", "x  ", " ", "  ", "\r",
    "\x0b\x0c x", "\x85y", "\u2028z", "<|im_start|>user\nhi<|im_end|>", "a\x00b\x7fc", "12345\n67",
    "\u00e9\u00e9 1234 abc123def", "__init__", "x == 1 && y != 2", "http://a.b/c?d=e&f",
]


def cls(cp):
    cat = unicodedata.category(chr(cp))
    if cp in WHITE_SPACE:
        return "S"
    return {"L": "L", "M": "M", "N": "N"}.get(cat[0], "O")


def regex_cls(ch):
    if regex.match(r"\s", ch):
        return "S"
    for c in "LMN":
        if regex.match(r"\p{%s}" % c, ch):
            return c
    return "O"


def stable(cp):
    if 0xD800 <= cp <= 0xDFFF or cp in (0x17F,) or 0xFB00 <= cp <= 0xFB4F:
        return False
    ch = chr(cp)
    if unicodedata.category(ch) == "Cn":
        return False
    if unicodedata.category(ch)[0] == "Z" and cp not in WHITE_SPACE:
        return True
    return regex_cls(ch) == cls(cp)


def split(pattern, text):
    if isinstance(pattern, list):   # cascade: matches and the gaps between them are pieces
        pieces = [text]
        for p in pattern:
            new = []
            for piece in pieces:
                last = 0
                for m in regex.finditer(p, piece):
                    if m.start() > last:
                        new.append(piece[last:m.start()])
                    new.append(m.group())
                    last = m.end()
                if last < len(piece):
                    new.append(piece[last:])
            pieces = new
        return pieces
    words, last = [], 0
    for m in regex.finditer(pattern, text):
        if m.start() > last:   # unmatched text: one word per char (never happens in practice)
            words.extend(text[last:m.start()])
        words.append(m.group())
        last = m.end()
    words.extend(text[last:])
    return words


def main():
    rng = random.Random(20261129)
    pool = [ord(c) for c in "aZqLlsStTmMdDrReEvV '\n\r\t\"!.,<|>_-0123456789"]
    pool += [0x0B, 0x0C, 0x85, 0xA0, 0x2003, 0x3000, 0x2028, 0x1680, 0x301, 0x308, 0x93F, 0xE31,
             0xE9, 0x4E2D, 0x3053, 0xAC00, 0x627, 0x915, 0x660, 0x2167, 0xBD, 0x1F389, 0x200D, 0xFE0F]
    texts = list(HAND)
    for _ in range(400):
        n = rng.randint(1, 24)
        cps = []
        for _ in range(n):
            if rng.random() < 0.15:
                while True:
                    cp = rng.choice([rng.randint(0x20, 0x2FFF), rng.randint(0x3000, 0xFFFF), rng.randint(0x10000, 0x1FFFF)])
                    if stable(cp):
                        break
            else:
                cp = rng.choice(pool)
            cps.append(cp)
        texts.append("".join(map(chr, cps)))
    out = {name: [[t, split(p, t)] for t in texts] for name, p in PATTERNS.items()}
    json.dump(out, sys.stdout, ensure_ascii=False, indent=0)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
