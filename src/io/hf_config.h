/* hf_config.h: reading a Hugging Face config.json (or any JSON file) with typed getters.
 *
 * Keys are dotted paths into nested objects ("text_config.num_hidden_layers"), since Qwen3.5
 * configs keep the language model's settings under text_config. Getters with a default return it
 * when the key is missing (or JSON null); every getter fails with a one-line bs_error naming the
 * key when the value has the wrong type. */
#ifndef BS_HF_CONFIG_H
#define BS_HF_CONFIG_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* Parse a JSON file; NULL with "path: line L column C: reason" on failure. json_decref it. */
json_t *bs_json_load_file(const char *path);

/* dir/config.json parsed (bs_json_load_file's errors). */
json_t *bs_hf_config_of_dir(const char *dir);

/* The value at a dotted path, or NULL if any component is missing. */
json_t *hf_get(const json_t *root, const char *key);

/* Integers accept JSON integers and integral reals; floats accept both; 0 or -1. */
int hf_int(const json_t *root, const char *key, int64_t def, int64_t *out);
int hf_int_req(const json_t *root, const char *key, int64_t *out);
int hf_float(const json_t *root, const char *key, double def, double *out);
int hf_float_req(const json_t *root, const char *key, double *out);
int hf_bool(const json_t *root, const char *key, bool def, bool *out);
/* String value, def if missing; NULL (with bs_error) if present but not a string. */
const char *hf_str(const json_t *root, const char *key, const char *def);
/* Integer array of at most max elements into out; *n gets the count. Missing: *n = 0, 0. */
int hf_int_array(const json_t *root, const char *key, int64_t *out, int max, int *n);

#endif
