/* convert_hf.c: Hugging Face Qwen3.5 / Qwen3.6 checkpoint -> qwen35 GGUF (see convert.h). */
#include "convert.h"
#include "util.h"
int bs_convert_hf_to_gguf(const char *in_dir, const char *out_gguf, int type, int n_threads) {
    (void)in_dir; (void)out_gguf; (void)type; (void)n_threads;
    return bs_error("hf-to-gguf: not implemented yet");
}
