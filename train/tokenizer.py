"""GPT-2 byte-level BPE as bitspark's tokenizer applies it (pre-tokenizer "qwen35"), and a
small deterministic BPE trainer.

Vocabulary layout (same shape as bitspark's synth vocabularies): ids 0..255 are the 256 single
bytes in byte order, then one token per merge, then the Qwen special tokens (control), then
[PADi] fillers (unused), and the last id is the drafter's mask token <|mask|> (control).

    tok = Tokenizer.load('train/data/vocab.json')
    ids = tok.encode('Hello <|im_end|>')       # special tokens parsed
    text = tok.decode(ids)
"""
import heapq
import json
import sys
from collections import Counter, defaultdict

import regex

QWEN35_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
              r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_pat = regex.compile(QWEN35_PAT)

# The Qwen3.5 special tokens in the order of their real ids 248044.. (qwen35-arch.md §6; the
# same list as bitspark's synth_meta.c).
SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
    "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
    "<tts_text_bos_single>", "<|audio_pad|>",
]
MASK = "<|mask|>"
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_UNUSED = 1, 3, 5


def bytes_to_unicode():
    """GPT-2's reversible byte -> code point map (printable bytes map to themselves)."""
    bs = list(range(ord('!'), ord('~') + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()
U2B = {v: k for k, v in B2U.items()}


def pretokenize(text):
    return _pat.findall(text)


def train_bpe(text, n_merges):
    """Return the merge list [(left_str, right_str)] of up to n_merges merges that each produce
    a new token. Pairs are counted over the pre-tokenized words; the most frequent pair wins,
    ties go to the lowest (left, right) token ids."""
    words = Counter(pretokenize(text))
    tokens = [B2U[b] for b in range(256)]
    index = {t: i for i, t in enumerate(tokens)}
    seqs = [[index[B2U[b]] for b in w.encode('utf-8')] for w in words]
    freqs = list(words.values())
    pair_count = defaultdict(int)
    where = defaultdict(set)
    for wi, s in enumerate(seqs):
        for a, b in zip(s, s[1:]):
            pair_count[(a, b)] += freqs[wi]
            where[(a, b)].add(wi)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        c, p = heapq.heappop(heap)
        if pair_count.get(p, 0) != -c or -c < 2:
            if pair_count.get(p, 0) >= 2 and pair_count[p] != -c:
                heapq.heappush(heap, (-pair_count[p], p))
            continue
        a, b = p
        new = tokens[a] + tokens[b]
        if new in index:                     # the same string made another way: no new token
            pair_count[p] = 0
            continue
        nid = len(tokens)
        tokens.append(new)
        index[new] = nid
        merges.append((tokens[a], tokens[b]))
        changed = defaultdict(int)
        for wi in list(where[p]):
            s, f = seqs[wi], freqs[wi]
            for x, y in zip(s, s[1:]):
                changed[(x, y)] -= f
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(nid)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[wi] = out
            for x, y in zip(out, out[1:]):
                changed[(x, y)] += f
                where[(x, y)].add(wi)
        for q, d in changed.items():
            if d:
                pair_count[q] += d
                if pair_count[q] >= 2:
                    heapq.heappush(heap, (-pair_count[q], q))
        pair_count[p] = 0
    return merges


class Tokenizer:
    def __init__(self, tokens, types, merges):
        self.tokens, self.types = tokens, types
        self.id_of = {t: i for i, t in enumerate(tokens) if types[i] != TOKEN_UNUSED}
        self.ranks = {tuple(m.split(' ')): r for r, m in enumerate(merges)}
        self.merges = merges
        self.specials = sorted([t for i, t in enumerate(tokens) if types[i] == TOKEN_CONTROL],
                               key=len, reverse=True)
        self._special_re = regex.compile('|'.join(regex.escape(s) for s in self.specials))
        self._cache = {}

    @classmethod
    def build(cls, merges, n_vocab):
        tokens = [B2U[b] for b in range(256)] + [l + r for l, r in merges]
        types = [TOKEN_NORMAL] * len(tokens)
        if len(tokens) + len(SPECIALS) + 1 > n_vocab:
            raise ValueError('vocabulary too small')
        tokens += SPECIALS
        types += [TOKEN_CONTROL] * len(SPECIALS)
        while len(tokens) < n_vocab - 1:
            tokens.append('[PAD%d]' % len(tokens))
            types.append(TOKEN_UNUSED)
        tokens.append(MASK)
        types.append(TOKEN_CONTROL)
        return cls(tokens, types, ['%s %s' % m for m in merges])

    @classmethod
    def load(cls, path):
        d = json.load(open(path))
        return cls(d['tokens'], d['types'], d['merges'])

    def save(self, path):
        json.dump({'tokens': self.tokens, 'types': self.types, 'merges': self.merges},
                  open(path, 'w'), ensure_ascii=False)

    @property
    def eos_id(self):
        return self.id_of['<|im_end|>']

    @property
    def mask_id(self):
        return self.id_of[MASK]

    def _bpe(self, word):
        if word in self._cache:
            return self._cache[word]
        parts = [B2U[b] for b in word.encode('utf-8')]
        while len(parts) > 1:
            best, bi = None, -1
            for i in range(len(parts) - 1):
                r = self.ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            parts[bi:bi + 2] = [parts[bi] + parts[bi + 1]]
        ids = [self.id_of[p] for p in parts]
        if len(self._cache) < 200000:
            self._cache[word] = ids
        return ids

    def encode(self, text, specials=True):
        out = []
        pos = 0
        pieces = []
        if specials:
            for m in self._special_re.finditer(text):
                pieces.append((text[pos:m.start()], None))
                pieces.append((None, self.id_of[m.group(0)]))
                pos = m.end()
        pieces.append((text[pos:], None))
        for s, sid in pieces:
            if sid is not None:
                out.append(sid)
            elif s:
                for w in pretokenize(s):
                    out.extend(self._bpe(w))
        return out

    def decode(self, ids):
        b = bytearray()
        for i in ids:
            t = self.tokens[i]
            if self.types[i] == TOKEN_NORMAL:
                b.extend(U2B[c] for c in t)
            else:
                b.extend(t.encode('utf-8'))
        return b.decode('utf-8', errors='replace')


def main(datadir, n_vocab):
    text = open(datadir + '/train.txt').read()
    # train the merges on the text between <|endoftext|> markers (specials are not words)
    plain = text.replace('<|endoftext|>', '\n')
    n_merges = n_vocab - 256 - len(SPECIALS) - 1
    merges = train_bpe(plain, n_merges)
    tok = Tokenizer.build(merges, n_vocab)
    tok.save(datadir + '/vocab.json')
    print('vocab %d: %d merges' % (n_vocab, len(merges)))


if __name__ == '__main__':
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2048)
