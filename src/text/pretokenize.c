/* pretokenize.c: see pretokenize.h. One scanner serves qwen35/qwen2/llama3 (they differ only
 * in whether marks count as letters and how many digits make a number); gpt2 has its own. */
#include "text/pretokenize.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static bool is_white_space(uint32_t c) {
    if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
    if (c < 0x85) return false;
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

unsigned bs_char_class(uint32_t cp) {
    unsigned f = BS_CC_ANY;  /* every in-text position is "something"; 0 means past the end */
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: f |= BS_CC_LETTER; break;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
        f |= BS_CC_MARK; break;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        f |= BS_CC_NUMBER; break;
    default: break;
    }
    if (is_white_space(cp)) f |= BS_CC_SPACE;
    return f;
}

static const struct { const char *name; bs_pre_type type; bool ignore_merges; } pre_names[] = {
    {"qwen35", BS_PRE_QWEN35, false},
    {"qwen2", BS_PRE_QWEN2, false},
    {"deepseek-r1-qwen", BS_PRE_QWEN2, false},
    {"stablelm2", BS_PRE_QWEN2, false},
    {"llama-bpe", BS_PRE_LLAMA3, true},
    {"llama3", BS_PRE_LLAMA3, true},
    {"llama-v3", BS_PRE_LLAMA3, true},
    {"gpt2", BS_PRE_GPT2, false},
    {"gpt-2", BS_PRE_GPT2, false},
    {"default", BS_PRE_DEFAULT, false},
};

int bs_pre_from_name(const char *name, bs_pre_type *type, bool *ignore_merges) {
    for (size_t i = 0; i < BS_ARRAY_LEN(pre_names); i++) {
        if (strcmp(pre_names[i].name, name) == 0) {
            *type = pre_names[i].type;
            *ignore_merges = pre_names[i].ignore_merges;
            return 0;
        }
    }
    return bs_error("unsupported pre-tokenizer '%s' (supported: qwen35, qwen2, llama-bpe, gpt2, default)", name);
}

const char *bs_pre_name(bs_pre_type type) {
    switch (type) {
    case BS_PRE_QWEN35: return "qwen35";
    case BS_PRE_QWEN2: return "qwen2";
    case BS_PRE_LLAMA3: return "llama-bpe";
    case BS_PRE_GPT2: return "gpt2";
    case BS_PRE_DEFAULT: return "default";
    }
    return "?";
}

/* Scanner state: the text, its classes, and the words found so far. */
typedef struct {
    const uint32_t *cps;
    size_t n, done, nw;   /* done: end of the last emitted word */
    size_t *lens;
    unsigned *cls;        /* class of each code point (0 never occurs in range) */
} scan;

static unsigned cls_at(const scan *s, size_t i) { return i < s->n ? s->cls[i] : 0; }
static uint32_t cp_at(const scan *s, size_t i) { return i < s->n ? s->cps[i] : 0xFFFFFFFFu; }

/* Close the word that ends at `end` (no-op when empty); returns its length. */
static size_t emit(scan *s, size_t end) {
    size_t len = end - s->done;
    if (len) s->lens[s->nw++] = len;
    s->done = end;
    return len;
}

static uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* Length of an English contraction ('s 't 'm 'd 're 've 'll) starting at pos, else 0. */
static size_t contraction(const scan *s, size_t pos, bool fold_case) {
    if (s->cps[pos] != '\'' || pos + 1 >= s->n) return 0;
    uint32_t a = cp_at(s, pos + 1), b = pos + 2 < s->n ? cp_at(s, pos + 2) : 0;
    if (fold_case) { a = ascii_lower(a); b = ascii_lower(b); }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* Whitespace alternatives shared by every splitter: \s*[\r\n]+ (qwen family only), then
 * \s+(?!\S) (a run before a non-space gives back its last char to the next word), then \s+.
 * Returns the new position, or pos if the text at pos is not whitespace. */
static size_t whitespace_run(scan *s, size_t pos, bool newline_rule) {
    size_t n_ws = 0, last_nl = 0;
    while (cls_at(s, pos + n_ws) & BS_CC_SPACE) {
        uint32_t c = s->cps[pos + n_ws];
        if (c == '\r' || c == '\n') last_nl = pos + n_ws + 1;
        n_ws++;
    }
    if (newline_rule && last_nl) { emit(s, last_nl); return last_nl; }
    if (n_ws > 1 && pos + n_ws < s->n) { emit(s, pos + n_ws - 1); return pos + n_ws - 1; }
    if (n_ws) { emit(s, pos + n_ws); return pos + n_ws; }
    return pos;
}

/* qwen35 / qwen2 / llama3. letters = LETTER (| MARK for qwen35), max_digits = 1 or 3. */
static void split_qwen(scan *s, unsigned letters, size_t max_digits) {
    const unsigned punct_stop = BS_CC_SPACE | BS_CC_NUMBER | letters;
    size_t pos = 0;
    while (pos < s->n) {
        uint32_t c = s->cps[pos];
        unsigned f = s->cls[pos];
        size_t k = contraction(s, pos, true);
        if (k) { pos += emit(s, pos + k); continue; }
        /* [^\r\n\p{L}\p{N}]?[\p{L}(\p{M})]+ : the optional lead may be any non-newline,
         * non-number char (letters included, then it is simply the first letter). */
        if (!(c == '\r' || c == '\n' || (f & BS_CC_NUMBER)) &&
            ((f & letters) || (cls_at(s, pos + 1) & letters))) {
            pos++;
            while (cls_at(s, pos) & letters) pos++;
            emit(s, pos);
            continue;
        }
        if (f & BS_CC_NUMBER) {  /* \p{N}{1,max_digits}, repeated */
            size_t start = pos;
            while ((cls_at(s, pos) & BS_CC_NUMBER) && pos - start < max_digits) pos++;
            emit(s, pos);
            continue;
        }
        /*  ?[^\s\p{L}(\p{M})\p{N}]+[\r\n]* */
        unsigned f2 = c == ' ' ? cls_at(s, pos + 1) : f;
        if (f2 && !(f2 & punct_stop)) {
            pos += c == ' ';
            while (cls_at(s, pos) && !(cls_at(s, pos) & punct_stop)) pos++;
            while (cp_at(s, pos) == '\r' || cp_at(s, pos) == '\n') pos++;
            emit(s, pos);
            continue;
        }
        size_t next = whitespace_run(s, pos, true);
        if (next != pos) { pos = next; continue; }
        pos++;              /* unreachable in practice: every char matches some branch */
        emit(s, pos);
    }
}

/* gpt2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static void split_gpt2(scan *s) {
    const unsigned stop = BS_CC_SPACE | BS_CC_LETTER | BS_CC_NUMBER;
    size_t pos = 0;
    while (pos < s->n) {
        uint32_t c = s->cps[pos];
        size_t k = contraction(s, pos, false);
        if (k) { pos += emit(s, pos + k); continue; }
        unsigned f2 = c == ' ' ? cls_at(s, pos + 1) : s->cls[pos];
        unsigned run = (f2 & BS_CC_LETTER) ? BS_CC_LETTER : (f2 & BS_CC_NUMBER) ? BS_CC_NUMBER : 0;
        if (run) {
            pos += c == ' ';
            while (cls_at(s, pos) & run) pos++;
            emit(s, pos);
            continue;
        }
        if (f2 && !(f2 & stop)) {
            pos += c == ' ';
            while (cls_at(s, pos) && !(cls_at(s, pos) & stop)) pos++;
            emit(s, pos);
            continue;
        }
        size_t next = whitespace_run(s, pos, false);
        if (next != pos) { pos = next; continue; }
        pos++;
        emit(s, pos);
    }
}

/* ---- default: a cascade of splits ---------------------------------------------------------- */

/* [\p{P}$+<=>^~|] as llama.cpp's collapsed-category regex sees it: the ASCII punctuation and
 * symbols except '`', and non-ASCII punctuation (P*). */
static bool default_punct(uint32_t c) {
    if (c < 0x80) return c != '`' && ((c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) ||
                                      (c >= 0x5B && c <= 0x5E) || c == '_' || (c >= 0x7B && c <= 0x7E));
    int cat = utf8proc_category((utf8proc_int32_t)c);
    return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

/* The steps of the default cascade. */
enum cut { CUT_PUNCT, CUT_GPT2, CUT_NUMBERS, CUT_DIGITS3 };

/* Length of the match of step `kind` at piece position i (0: none): a run of default_punct, a
 * run of \p{N}, or exactly three ASCII digits. */
static size_t match_at(const scan *s, size_t off, size_t i, size_t n, enum cut kind) {
    const uint32_t *c = s->cps + off;
    if (kind == CUT_DIGITS3) {
        if (i + 3 > n) return 0;
        for (size_t k = i; k < i + 3; k++) if (c[k] < '0' || c[k] > '9') return 0;
        return 3;
    }
    size_t j = i;
    while (j < n && (kind == CUT_PUNCT ? default_punct(c[j]) : (s->cls[off + j] & BS_CC_NUMBER) != 0)) j++;
    return j - i;
}

/* One regex step over the piece [off, off+n): every match and every stretch between matches
 * becomes a piece (llama.cpp's unicode_regex_split_stl). */
static void cut_matches(scan *s, size_t off, size_t n, enum cut kind) {
    size_t i = 0, gap = 0;
    while (i < n) {
        size_t m = match_at(s, off, i, n, kind);
        if (!m) { i++; continue; }
        if (i > gap) emit(s, off + i);
        emit(s, off + i + m);
        i += m;
        gap = i;
    }
    emit(s, off + n);
}

/* Apply one step to every piece in lens[0..nw), writing the refined pieces back into lens. */
static size_t refine(scan *s, size_t nw, enum cut kind) {
    size_t *old = bs_xmalloc((nw + 1) * sizeof(size_t)), off = 0;
    memcpy(old, s->lens, nw * sizeof(size_t));
    s->nw = 0;
    s->done = 0;
    for (size_t w = 0; w < nw; w++) {
        if (kind == CUT_GPT2) {   /* the gpt2 scanner on one piece */
            scan sub = {s->cps + off, old[w], 0, 0, s->lens + s->nw, s->cls + off};
            split_gpt2(&sub);
            emit(&sub, old[w]);
            s->nw += sub.nw;
            s->done = off + old[w];
        } else {
            cut_matches(s, off, old[w], kind);
        }
        off += old[w];
    }
    free(old);
    return s->nw;
}

static void split_default(scan *s) {
    s->lens[0] = s->n;
    size_t nw = refine(s, 1, CUT_PUNCT);
    nw = refine(s, nw, CUT_GPT2);
    nw = refine(s, nw, CUT_NUMBERS);
    refine(s, nw, CUT_DIGITS3);
}

size_t bs_pretokenize(bs_pre_type type, const uint32_t *cps, size_t n, size_t *lens) {
    if (n == 0) return 0;
    scan s = {cps, n, 0, 0, lens, bs_xmalloc(n * sizeof(unsigned))};
    for (size_t i = 0; i < n; i++) s.cls[i] = bs_char_class(cps[i]);
    switch (type) {
    case BS_PRE_QWEN35: split_qwen(&s, BS_CC_LETTER | BS_CC_MARK, 1); break;
    case BS_PRE_QWEN2: split_qwen(&s, BS_CC_LETTER, 1); break;
    case BS_PRE_LLAMA3: split_qwen(&s, BS_CC_LETTER, 3); break;
    case BS_PRE_GPT2: split_gpt2(&s); break;
    case BS_PRE_DEFAULT: split_default(&s); break;
    }
    emit(&s, n);  /* defensive: nothing may be left over */
    free(s.cls);
    return s.nw;
}
