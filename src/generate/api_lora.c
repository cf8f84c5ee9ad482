/* api_lora.c: run-time LoRA adapters through the public API (bitspark.h): loading an adapter
 * for a model; bs_lora_attach / bs_lora_detach / bs_lora_free are model/lora.h's own. */
#include "bitspark.h"
#include "model/lora.h"
#include "model/qwen35.h"
#include "io/util.h"

bs_lora *bs_lora_adapter_load(const bs_model *m, const char *path) {
    if (!m || !path) return bs_error("bs_lora_adapter_load: no model or path"), NULL;
    if (!m->layers) return bs_error("%s: the model was loaded vocab-only", path), NULL;
    bs_lora *l = bs_lora_load(path, m->file);
    if (!l) bs_error_prefix("LoRA %s: ", path);
    return l;
}
