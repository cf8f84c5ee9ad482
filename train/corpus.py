"""Build the English training corpus from text shipped in Debian packages.

Sources (all read from the local file system, nothing is downloaded):
  - /usr/share/games/fortunes/*   Debian package `fortunes` (fortune-mod data; BSD-4-Clause
                                  for the program, the quotation files are distributed with it)
  - /usr/share/common-licenses/*  Debian package `base-files` (the license texts themselves,
                                  each under its own terms, which permit verbatim copying)
  - /usr/share/info/*.info*.gz    GNU manuals installed by coreutils, findutils, diffutils, bc,
                                  ... (GNU Free Documentation License)

Documents are normalised to plain text and joined with <|endoftext|>. A fixed 2% of documents
(every 50th, by a hash of the text so the split does not depend on file order) is held out.

    python3 train/corpus.py OUTDIR     ->  OUTDIR/train.txt, OUTDIR/heldout.txt, OUTDIR/sources.txt
"""
import glob
import gzip
import hashlib
import os
import re
import sys

EOT = '<|endoftext|>'


def read_text(path):
    raw = gzip.open(path, 'rb').read() if path.endswith('.gz') else open(path, 'rb').read()
    return raw.decode('utf-8', errors='ignore')


def clean(s):
    s = s.replace('\r', '').replace('\t', '    ')
    s = re.sub(r'[\x00-\x08\x0b-\x1f\x7f]', '', s)       # control bytes (info node markers, ...)
    s = re.sub(r'[ ]+\n', '\n', s)
    s = re.sub(r'\n{3,}', '\n\n', s)
    return s.strip()


def fortunes():
    for path in sorted(glob.glob('/usr/share/games/fortunes/*')):
        if (path.endswith(('.dat', '.u8')) or os.path.isdir(path) or os.path.islink(path)
                or os.path.basename(path) == 'ascii-art'):
            continue
        for doc in re.split(r'\n%\n', read_text(path)):
            doc = clean(doc)
            if 20 <= len(doc) <= 4000:
                yield 'fortunes:' + os.path.basename(path), doc


def paragraphs_in_chunks(text, size=1500):
    """Split long texts at paragraph boundaries into documents of about `size` characters."""
    cur = []
    n = 0
    for para in text.split('\n\n'):
        cur.append(para)
        n += len(para) + 2
        if n >= size:
            yield '\n\n'.join(cur)
            cur, n = [], 0
    if cur:
        yield '\n\n'.join(cur)


def licenses():
    seen = set()
    for path in sorted(glob.glob('/usr/share/common-licenses/*')):
        if os.path.islink(path) or os.path.isdir(path):
            continue
        text = clean(read_text(path))
        h = hashlib.sha1(text.encode()).hexdigest()
        if h in seen:
            continue
        seen.add(h)
        for doc in paragraphs_in_chunks(text):
            yield 'common-licenses:' + os.path.basename(path), doc


def info_manuals():
    for path in sorted(glob.glob('/usr/share/info/*.info*.gz')):
        text = read_text(path)
        # drop node headers ("File: x.info,  Node: ...") and menu/index lines
        lines = [l for l in text.split('\n')
                 if not l.startswith(('File: ', '* Menu:', 'Tag Table:', 'End Tag Table', 'Indirect:'))
                 and not re.match(r'^\* .*::', l)]
        for doc in paragraphs_in_chunks(clean('\n'.join(lines))):
            if len(doc) > 200:
                yield 'info:' + os.path.basename(path).split('.info')[0], doc


def is_heldout(doc):
    return int(hashlib.sha1(doc.encode()).hexdigest()[:8], 16) % 50 == 0


def main(outdir):
    os.makedirs(outdir, exist_ok=True)
    train, held, counts = [], [], {}
    for gen in (fortunes, licenses, info_manuals):
        for src, doc in gen():
            (held if is_heldout(doc) else train).append(doc)
            k = src.split(':')[0]
            counts[k] = counts.get(k, 0) + len(doc)
    with open(os.path.join(outdir, 'train.txt'), 'w') as f:
        f.write(EOT.join(train) + EOT)
    with open(os.path.join(outdir, 'heldout.txt'), 'w') as f:
        f.write(EOT.join(held) + EOT)
    with open(os.path.join(outdir, 'sources.txt'), 'w') as f:
        for k, v in counts.items():
            f.write('%s\t%d chars\n' % (k, v))
    print('train %d docs, heldout %d docs; %s' % (len(train), len(held), counts))


if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else 'train/data')
