/* grammar_allof.h: the keywords of a JSON schema beside anyOf/oneOf, $ref, enum or const, for
 * grammar_schema.c (grammar_allof.c). Internal to src/sample/. */
#ifndef BS_GRAMMAR_ALLOF_H
#define BS_GRAMMAR_ALLOF_H

#include <jansson.h>
#include <stdbool.h>

/* Whether schema s has a keyword that constrains values other than `except` (annotations,
 * $defs and unknown keywords do not). */
bool ga_constrained(json_t *s, const char *except);
/* s without key (a new reference). */
json_t *ga_without(json_t *s, const char *key);
/* The schema of the values both a and b allow, as one schema (a new reference): false where they
 * contradict (no value fits both); NULL + bs_error where a keyword of both cannot be combined. */
json_t *ga_merge(json_t *a, json_t *b);
/* The target of a $ref into root's $defs or definitions, or root itself ("#"); NULL if none. */
json_t *ga_resolve(json_t *root, const char *ref);
/* 1 if the JSON value v meets schema s ($ref resolved in root), 0 if not, -1 + bs_error where s
 * has a keyword that is not checked on values. */
int ga_value_fits(json_t *s, json_t *v, json_t *root);

#endif
