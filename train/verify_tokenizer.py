"""Tokenize held-out text with this Python tokenizer and with `bitspark tokenize` (through a
tokenizer-only GGUF with the same vocabulary) and compare the ids.

    python3 train/verify_tokenizer.py BITSPARK train/data/vocab.json train/data/heldout.txt [GGUF]
"""
import os
import subprocess
import sys
import tempfile

from export_gguf import add_tokenizer
from gguf_writer import GGUFWriter
from tokenizer import Tokenizer


def main():
    bitspark, vocab, text_path = sys.argv[1:4]
    tok = Tokenizer.load(vocab)
    gguf = sys.argv[4] if len(sys.argv) > 4 else None
    tmp = tempfile.mkdtemp()
    if gguf is None:
        gguf = os.path.join(tmp, 'vocab.gguf')
        w = GGUFWriter()
        w.add('general.architecture', 'qwen35')
        add_tokenizer(w, tok)
        w.write(gguf)
    text = open(text_path).read()
    docs = [d for d in text.split('<|endoftext|>') if d]
    n_tok = n_bad = 0
    for i, d in enumerate(docs):
        p = os.path.join(tmp, 'doc.txt')
        open(p, 'w').write(d)
        r = subprocess.run([bitspark, 'tokenize', '-m', gguf, '-f', p], capture_output=True, text=True)
        if r.returncode:
            sys.exit('bitspark tokenize failed: ' + r.stderr)
        theirs = [int(x) for x in r.stdout.split()]
        ours = tok.encode(d, specials=False)
        n_tok += len(ours)
        if theirs != ours:
            n_bad += 1
            k = next((j for j in range(min(len(ours), len(theirs))) if ours[j] != theirs[j]), None)
            print('doc %d differs at token %s: ours %s theirs %s' % (i, k, ours[k:k + 5] if k is not None else ours[-3:],
                                                                   theirs[k:k + 5] if k is not None else theirs[-3:]))
    # special tokens parsed
    s = '<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello.<|im_end|>'
    p = os.path.join(tmp, 'chat.txt')
    open(p, 'w').write(s)
    r = subprocess.run([bitspark, 'tokenize', '-m', gguf, '--special', '-f', p], capture_output=True, text=True)
    chat_ok = [int(x) for x in r.stdout.split()] == tok.encode(s)
    print('%d documents, %d tokens: %d documents differ; chat with specials %s' % (
        len(docs), n_tok, n_bad, 'identical' if chat_ok else 'DIFFERENT'))
    sys.exit(1 if n_bad or not chat_ok else 0)


if __name__ == '__main__':
    main()
