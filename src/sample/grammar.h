/* grammar.h: constrained decoding with GBNF grammars (llama.cpp's grammar format) and the JSON
 * schemas that compile to them.
 *
 * A grammar is compiled into rules of alternatives of elements (a character class or a rule
 * reference); repetitions, optionals and groups become rules of their own. Matching keeps the
 * set of parse stacks (the pushdown automaton's configurations) after the text generated so far;
 * a token is allowed when its text's code points advance at least one stack. The mask over the
 * vocabulary walks a trie of every token's code points with those stacks, so a prefix that no
 * stack takes is cut with all the tokens below it (no scan of the vocabulary per step).
 * End-of-generation tokens are allowed once some stack is complete.
 *
 * Limits: tokens whose text is not whole UTF-8 (byte pieces) and control tokens other than
 * end-of-generation are never allowed under a grammar; left-recursive rules are refused.
 *
 * Every grammar comes from a request, so its size and the work it may cause are bounded before
 * anything is allocated (the limits below; exceeding one is an error naming it), no allocation
 * aborts (failures are errors), compiling is linear in the grammar's size, and matching stops
 * with an error when one step (a token's mask, or accepting a token) would need more than
 * BS_GRAMMAR_MAX_STEPS stack operations or BS_GRAMMAR_MAX_MS of CPU time (an ambiguous
 * grammar), never dropping alternatives. Sets of stacks and their steps per code point are
 * cached per state, and a set whose characters mostly lead back to itself (a string's body), or
 * along a chain of sets that long (a string of bounded length), allows whole vocabulary-trie
 * subtrees at once, which keeps masks near a millisecond. */
#ifndef BS_GRAMMAR_H
#define BS_GRAMMAR_H

#include "text/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct bs_grammar bs_grammar;

#define BS_GRAMMAR_MAX_BYTES (256 * 1024)   /* GBNF text, also what a JSON schema may generate */
#define BS_GRAMMAR_MAX_RULES 16384          /* rules, counting those groups and repetitions make */
#define BS_GRAMMAR_MAX_SIZE 262144          /* elements + alternatives after expanding x{m,n} */
#define BS_GRAMMAR_MAX_REPEAT 64            /* n of one x{m,n} (each copy is an element) */
#define BS_GRAMMAR_MAX_STEPS 2000000        /* stack operations for one token's mask or accept */
#define BS_GRAMMAR_MAX_MS 50                /* and milliseconds of CPU time for it */

/* Compile GBNF text; the start rule is `root`. NULL + bs_error with the line of a syntax error,
 * an undefined rule, left recursion, a limit passed, or a root that matches no text at all. */
bs_grammar *bs_grammar_parse(const char *gbnf);
void bs_grammar_free(bs_grammar *g);

/* GBNF of a JSON schema (grammar_schema.c): objects (properties, required), arrays (items,
 * minItems, maxItems), strings (enum, const, minLength, maxLength, pattern, the formats of
 * bs_grammar_format_pattern), numbers, integers, booleans, null, enum, const,
 * anyOf / oneOf, $ref into #/$defs or #/definitions, with the keywords beside them merged in
 * (grammar_allof.c; an enum's or const's values checked against them, multipleOf and
 * uniqueItems included). malloc'd; NULL + bs_error on what it does not support. Outside enum
 * and const, multipleOf, uniqueItems and minProperties/maxProperties are not written (a
 * grammar cannot count them): the one kind of constraint it leaves out, as grammar_schema.c
 * says. schema NULL: any JSON object (response_format json_object). */
char *bs_grammar_from_json_schema(const char *schema);
/* GBNF for the JSON text of a string matching `pattern`, a JSON schema's ECMAScript regular
 * expression (grammar_pattern.c: what it supports and refuses): an expression, "\"" to "\"".
 * malloc'd; NULL + bs_error naming what is not supported. */
char *bs_grammar_from_pattern(const char *pattern);
/* The same, and the lengths in code points of the strings it allows: *min_len to *max_len (-1:
 * unbounded). */
char *bs_grammar_from_pattern_len(const char *pattern, long *min_len, long *max_len);
/* The pattern for a string "format" of a fixed shape (date, time, date-time, uuid, ipv4); NULL
 * for the others (annotations). */
const char *bs_grammar_format_pattern(const char *format);
/* One bound of a schema's minimum/maximum (has: given; incl: inclusive): exactly i where the
 * schema wrote an integer (is_int), else the double v. */
typedef struct bs_grammar_bound { bool has, incl, is_int; int64_t i; double v; } bs_grammar_bound;
/* GBNF for the integers from lo to hi (either bound absent: unbounded; grammar_range.c), as the
 * schema's integer rule writes them. malloc'd; NULL + bs_error for an empty range. */
char *bs_grammar_int_range(bs_grammar_bound lo, bs_grammar_bound hi);
/* GBNF for the numbers from lo to hi (either absent: unbounded), written without an exponent;
 * bounds that are not whole are rounded inward. NULL + bs_error if empty. */
char *bs_grammar_num_range(bs_grammar_bound lo, bs_grammar_bound hi);
/* GBNF of one call of the OpenAI-style tools (a JSON array; only: that function, or NULL: any of
 * them), in the JSON form <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, the
 * arguments following each tool's parameter schema. malloc'd; NULL + bs_error. */
char *bs_grammar_for_tools(const char *tools, const char *only);

/* A tokenizer's tokens as a trie of code points (built once per tokenizer; shared read-only). */
typedef struct bs_grammar_vocab bs_grammar_vocab;
bs_grammar_vocab *bs_grammar_vocab_new(const bs_tokenizer *tok);
/* The same from token texts (piece[id] NULL: never allowed; eog[id]: end-of-generation), e.g. a
 * benchmark's vocabulary without a model. */
bs_grammar_vocab *bs_grammar_vocab_from_pieces(const char *const *piece, const size_t *len, const bool *eog, int n_vocab);
int bs_grammar_vocab_size(const bs_grammar_vocab *v);
void bs_grammar_vocab_free(bs_grammar_vocab *v);

/* Matching state: what the generated text so far leaves open. */
typedef struct bs_grammar_state bs_grammar_state;
bs_grammar_state *bs_grammar_state_new(const bs_grammar *g, const bs_grammar_vocab *v);
void bs_grammar_state_free(bs_grammar_state *s);
void bs_grammar_state_reset(bs_grammar_state *s);   /* back to the start */
/* Advance by token id: 0, or -1 when the grammar does not allow it (the state is unchanged). */
int bs_grammar_accept(bs_grammar_state *s, int32_t id);
bool bs_grammar_allows(const bs_grammar_state *s, int32_t id);
/* Advance by UTF-8 text (tests, prefilled text): 0, or -1 when it does not match (unchanged). */
int bs_grammar_accept_text(bs_grammar_state *s, const char *text);
/* How many of ids[0..n) in a row the grammar would accept from here (the state is unchanged). */
int bs_grammar_valid_prefix(bs_grammar_state *s, const int32_t *ids, int n);
bool bs_grammar_complete(const bs_grammar_state *s);
/* logits[id] = -inf for every token the grammar does not allow now (n_vocab entries). 0, or -1 +
 * bs_error (starting "grammar:") when no token of the vocabulary is allowed, the step budget is
 * spent or the cancel hook said stop; the logits are then all -inf. */
int bs_grammar_mask(bs_grammar_state *s, float *logits, int n_vocab);
/* A hook polled during long matching work: true stops it with an error (a cancelled request). */
void bs_grammar_state_set_cancel(bs_grammar_state *s, bool (*cancelled)(void *ud), void *ud);

#endif
