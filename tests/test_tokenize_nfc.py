"""The tokenizer's NFC against an independent reference of Hugging Face's semantics, and the
batch mode `bitspark tokenize --jsonl`.

The reference, written here from the published algorithms (not from the C code): special tokens
cut out of the raw text (longest first), Python's unicodedata.normalize('NFC') of each fragment
between them (HF's {"type": "NFC"} normalizer; Qwen's added tokens are normalized: false), the
qwen35 pre-tokenizer regex run by the `regex` module, GPT-2 byte-level encoding and BPE by merge
rank over the fixture vocabulary (read with tests/gguf_reader.py). Strings: the cases of issue
26 (decomposed accents, Kelvin/Angstrom/Ohm signs, EN/EM quads, CJK compatibility ideographs,
Hebrew and Myanmar marks out of order, Hangul jamo, Bengali U+09DF), real sentences in NFD, NFC
text, and random mixes of letters, marks and compatibility characters. All of them go through
one `tokenize --jsonl` process per mode. Checks, per string:
  1. bitspark (default: NFC by the qwen35 rule) on the raw text == the reference;
  2. bitspark on the raw text == bitspark --tokenizer-normalize none on Python's NFC of it;
  3. --tokenizer-normalize none on the raw text == the reference without NFC (llama.cpp's ids);
  4. with --special, specials inside non-NFC text stay special and the text between them is
     normalized fragment by fragment;
and most non-NFC strings do tokenize differently with and without NFC (the test can fail).
Then --jsonl on bad lines: each gets {"error": "line N: ..."} on its own output line, the good
lines keep their ids, stderr names every bad line and the exit status is 1.
"""
import json
import os
import random
import subprocess
import sys
import unicodedata

import regex

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_reader import GGUF  # noqa: E402

B = os.environ['BITSPARK']
MODEL = os.path.join(os.environ['BS_FIXTURES'], 'tiny-f32.gguf')
QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
          r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
fails = []


def check(ok, what):
    print(('ok   ' if ok else 'FAIL ') + what)
    if not ok:
        fails.append(what)


def byte_chars():
    """GPT-2's byte -> printable character map."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


class Reference:
    def __init__(self, path):
        m = GGUF(path).meta
        toks, types = m['tokenizer.ggml.tokens'], m['tokenizer.ggml.token_type']
        self.vocab = {t: i for i, t in enumerate(toks)}
        self.ranks = {tuple(mg.split(' ', 1)): r for r, mg in enumerate(m['tokenizer.ggml.merges'])}
        self.specials = sorted((t for t, ty in zip(toks, types) if ty in (3, 4)), key=lambda t: -len(t))
        self.bc = byte_chars()
        self.split = regex.compile(QWEN35)

    def bpe(self, word):
        syms = [self.bc[b] for b in word.encode('utf-8')]
        while len(syms) > 1:
            pairs = [(self.ranks.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(syms, syms[1:]))]
            rank, i = min(pairs)
            if rank == 1 << 30:
                break
            syms[i:i + 2] = [syms[i] + syms[i + 1]]
        return [self.vocab[s] for s in syms]

    def fragments(self, text, special):
        """[(is_special, text)], specials cut out longest first, as llama.cpp does."""
        frags = [(False, text)]
        for st in (self.specials if special else []):
            out = []
            for sp, t in frags:
                if sp:
                    out.append((sp, t))
                    continue
                parts = t.split(st)
                for k, p in enumerate(parts):
                    if p:
                        out.append((False, p))
                    if k + 1 < len(parts):
                        out.append((True, st))
            frags = out
        return frags

    def encode(self, text, nfc, special=False):
        ids = []
        for sp, t in self.fragments(text, special):
            if sp:
                ids.append(self.vocab[t])
                continue
            if nfc:
                t = unicodedata.normalize('NFC', t)
            for w in self.split.findall(t):
                ids += self.bpe(w)
        return ids


def tokenize_jsonl(texts, *flags, expect_ok=True):
    inp = ''.join(json.dumps(t) + '\n' for t in texts)
    r = subprocess.run([B, 'tokenize', '-m', MODEL, '--jsonl'] + list(flags), input=inp.encode(),
                       capture_output=True)
    lines = r.stdout.decode().splitlines()
    if expect_ok:
        check(r.returncode == 0 and len(lines) == len(texts),
              'tokenize --jsonl %s: %d strings, %d answers, rc %d %s' % (' '.join(flags), len(texts), len(lines),
                                                                       r.returncode, r.stderr.decode()[-200:]))
    return [json.loads(x) for x in lines], r


ISSUE = ['e\u0301', 'Cafe\u0301', '\u212a', '5 \u212a', '\u212b', '\u2126', 'a\u2000b\u2001c', '\uf900\uf92c\ufa10',
         '\u05d1\u05bc\u05b8', '\u1000\u103a\u1037', '\u1100\u1161', '\u1112\u1161\u11ab', '\u09df', '\u0958']
REAL = ['Crème brûlée et café au lait, naïve façade', 'Ångström, Øresund and Smørrebrød', 'Tiếng Việt có dấu',
        '한국어 텍스트를 자모로 분해하면', 'がぎぐげご パピプペポ', 'Ελληνικά: άέήίόύώ ΐΰ', 'Zażółć gęślą jaźń',
        'Příliš žluťoučký kůň úpěl ďábelské ódy', 'Überprüfung der Größe', 'niño, año, señor',
        'शक्ति और ज़मीन', 'আমার সোনার বাংলা য়', 'בְּרֵאשִׁית בָּרָא', 'ăâđêôơư ÀÁÂÃ']
POOL = ('aeiouKnsy tT5.,!\n' + '\u0300\u0301\u0302\u0303\u0308\u0327\u0323\u031b' + '\u212a\u212b\u2126\u2000\u2001'
        + '\uf900\uf92c\u1100\u1161\u11ab\u1112\u09df\u09af\u09bc\u05d1\u05bc\u05b8\u1000\u103a\u1037\u00e9\u4e2d\U0001f389')


def strings():
    rng = random.Random(26)
    out = list(ISSUE) + [unicodedata.normalize('NFD', s) for s in REAL] + REAL
    out += [unicodedata.normalize('NFD', s)[::-1] for s in REAL]   # marks before their letters
    for _ in range(600):
        out.append(''.join(rng.choice(POOL) for _ in range(rng.randint(1, 40))))
    return out


def special_strings():
    return ['<|im_start|>user\nCafe\u0301<|im_end|>', '<|im_start|>\u0338x', 'e<|im_end|>\u0301',
            '<think>\u212a\u2126</think>\u1100\u1161', '<|im_start|>' + unicodedata.normalize('NFD', REAL[2])]


def check_semantics(ref):
    texts = strings()
    nfc = [unicodedata.normalize('NFC', t) for t in texts]
    default, _ = tokenize_jsonl(texts)
    none_raw, _ = tokenize_jsonl(texts, '--tokenizer-normalize', 'none')
    none_nfc, _ = tokenize_jsonl(nfc, '--tokenizer-normalize', 'none')
    if not (len(default) == len(none_raw) == len(none_nfc) == len(texts)):
        return
    bad = [[], [], []]
    for i, t in enumerate(texts):
        if default[i] != ref.encode(t, True):
            bad[0].append(i)
        if default[i] != none_nfc[i]:
            bad[1].append(i)
        if none_raw[i] != ref.encode(t, False):
            bad[2].append(i)
    for k, what in enumerate(['default == reference (NFC, regex split, BPE)', 'default == none on Python NFC',
                              'none == reference without NFC (llama.cpp)']):
        check(not bad[k], '%s: %d of %d strings differ %s' % (what, len(bad[k]), len(texts),
                                                            [texts[i] for i in bad[k][:3]]))
    non_nfc = [i for i, t in enumerate(texts) if nfc[i] != t]
    differ = sum(default[i] != none_raw[i] for i in non_nfc)
    check(len(non_nfc) > 400 and differ == len(non_nfc),
          '%d of %d non-NFC strings tokenize differently with NFC and without' % (differ, len(non_nfc)))
    same = [i for i, t in enumerate(texts) if nfc[i] == t]
    check(all(default[i] == none_raw[i] for i in same), '%d NFC strings: the same ids either way' % len(same))
    issue = all(default[i] == none_nfc[i] and default[i] != none_raw[i] for i in range(len(ISSUE)))
    check(issue, 'the %d cases of issue 26 get their NFC form\'s ids' % len(ISSUE))


def check_specials(ref):
    texts = special_strings()
    got, _ = tokenize_jsonl(texts, '--special')
    want = [ref.encode(t, True, special=True) for t in texts]
    check(got == want, 'specials inside non-NFC text stay special, fragments normalized alone: %s' %
          [(t, g, w) for t, g, w in zip(texts, got, want) if g != w][:2])
    whole = [ref.encode(unicodedata.normalize('NFC', texts[1]), True, special=True)]
    check(whole[0] != want[1], "'>' + U+0338 after <|im_start|>: NFC of the whole text (U+226F) would differ")


def check_bad_lines():
    good = ['"Cafe\\u0301"', '"x"', '"<|im_end|>"', '""', '"a\\u0000b"']
    lines = [good[0], 'not json', good[1], '42', '"\\ud800"', '', good[2], '["a"]', good[3], '"unterminated',
             good[4]]
    inp = '\n'.join(lines).encode() + b'\n' + b'"\xff"\r\n' + b'"crlf"\r\n'
    r = subprocess.run([B, 'tokenize', '-m', MODEL, '--jsonl'], input=inp, capture_output=True)
    out = r.stdout.decode().splitlines()
    check(r.returncode == 1 and len(out) == len(lines) + 2, 'bad lines: rc %d, %d answers for %d lines' %
          (r.returncode, len(out), len(lines) + 2))
    if len(out) != len(lines) + 2:
        return
    ans = [json.loads(x) for x in out]
    bad_at = [i for i, a in enumerate(ans) if isinstance(a, dict)]
    check(bad_at == [1, 3, 4, 5, 7, 9, 11], 'error objects exactly at the bad lines: %s' % bad_at)
    check(all(ans[i]['error'].startswith('line %d: ' % (i + 1)) for i in bad_at), 'each error names its line')
    err = r.stderr.decode()
    check(all(('line %d: ' % (i + 1)) in err for i in bad_at) and '7 of 13 lines failed' in err,
          'stderr names every bad line and the count')
    clean, _ = tokenize_jsonl([json.loads(g) for g in good] + ['crlf'])
    check([ans[i] for i in (0, 2, 6, 8, 10, 12)] == clean, 'good lines between bad ones keep their ids (CRLF too)')
    check(ans[8] == [] and len(ans[10]) == 3, 'empty string -> [], U+0000 kept as a character')
    r = subprocess.run([B, 'tokenize', '-m', MODEL, '--jsonl', 'text'], capture_output=True, text=True)
    check(r.returncode == 1 and 'not a TEXT argument' in r.stderr, '--jsonl with a TEXT argument is refused')
    r = subprocess.run([B, 'tokenize', '-m', MODEL, '--tokenizer-normalize', 'nfx', 'a'], capture_output=True,
                       text=True)
    check(r.returncode == 1 and "expected auto|none|nfc|nfd|nfkc|nfkd, got 'nfx'" in r.stderr, 'a bad --tokenizer-normalize value')


def main():
    ref = Reference(MODEL)
    check(ref.encode('Hello, world!', False) == [72, 101, 597, 44, 569, 33], 'the reference BPE gives llama.cpp\'s '
          'ids for the fixture vector "Hello, world!"')
    check_semantics(ref)
    check_specials(ref)
    check_bad_lines()
    print('%d failure(s)' % len(fails))
    sys.exit(1 if fails else 0)


main()
