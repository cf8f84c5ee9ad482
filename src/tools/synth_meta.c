/* synth_meta.c: GGUF metadata of synthetic models: the qwen35 / dspark hyperparameter keys with
 * the converter's key names and value types (qwen35-arch.md §5.1, prism-fork.md §3.1), and for
 * targets a byte-level BPE vocabulary trained on the built-in corpus, the Qwen special tokens
 * and a ChatML + thinking chat template. */
#include "tools/synth_impl.h"
#include "tools/bpe_train.h"
#include "formats/quant.h"
#include "formats/quantize.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

/* The Qwen3.5 special tokens in the order of their real ids 248044..248076 (qwen35-arch.md §6).
 * The names of the seven audio / TTS tokens (248070..248076) are not in our notes; these are
 * placeholders in the same style. */
static const char *const specials[SYNTH_N_SPECIALS] = {
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
    "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
    "<tts_text_bos_single>", "<|audio_pad|>",
};
#define REAL_SPECIAL_BASE 248044
enum { TOKEN_NORMAL = 1, TOKEN_CONTROL = 3, TOKEN_UNUSED = 5 };

/* Written for bitspark in the shape of the Qwen3.5 family template (ChatML turns, <think>
 * reasoning blocks kept only after the last user turn, XML-style tool calls, tool results as a
 * user turn of <tool_response> blocks, generation prompt opening a think block). */
static const char chat_template[] =
    "{%- set ns = namespace(last_user=-1) -%}\n"
    "{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}\n"
    "{%- if tools -%}\n"
    "{{- '<|im_start|>system\\n' -}}\n"
    "{%- if messages and messages[0].role == 'system' -%}{{- messages[0].content + '\\n\\n' -}}{%- endif -%}\n"
    "{{- '# Tools\\n\\nYou may call the functions described below. Their signatures, as JSON, are inside <tools></tools>:\\n<tools>' -}}\n"
    "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}\n"
    "{{- '\\n</tools>\\n\\nTo call a function, reply with:\\n<tool_call>\\n<function=NAME>\\n<parameter=NAME>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call><|im_end|>\\n' -}}\n"
    "{%- elif messages and messages[0].role == 'system' -%}\n"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' -}}\n"
    "{%- endif -%}\n"
    "{%- for m in messages -%}\n"
    "{%- if m.role == 'system' and loop.first -%}\n"
    "{%- elif m.role == 'user' or m.role == 'system' -%}\n"
    "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}\n"
    "{%- elif m.role == 'assistant' -%}\n"
    "{%- set content = m.content if m.content is string else '' -%}\n"
    "{%- set reasoning = m.reasoning_content if m.reasoning_content is string else '' -%}\n"
    "{%- if '</think>' in content -%}\n"
    "{%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\\n') -%}\n"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}\n"
    "{%- endif -%}\n"
    "{{- '<|im_start|>assistant\\n' -}}\n"
    "{%- if loop.index0 > ns.last_user and reasoning -%}{{- '<think>\\n' + reasoning + '\\n</think>\\n\\n' -}}{%- endif -%}\n"
    "{{- content -}}\n"
    "{%- if m.tool_calls -%}\n"
    "{%- for tc in m.tool_calls -%}\n"
    "{%- set f = tc.function if tc.function is defined else tc -%}\n"
    "{{- '\\n<tool_call>\\n<function=' + f.name + '>\\n' -}}\n"
    "{%- for k, v in f.arguments.items() -%}{{- '<parameter=' + k + '>\\n' + (v if v is string else v | tojson) + '\\n</parameter>\\n' -}}{%- endfor -%}\n"
    "{{- '</function>\\n</tool_call>' -}}\n"
    "{%- endfor -%}\n"
    "{%- endif -%}\n"
    "{{- '<|im_end|>\\n' -}}\n"
    "{%- elif m.role == 'tool' -%}\n"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}\n"
    "{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' -}}\n"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "{{- '<|im_start|>assistant\\n' -}}\n"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- else -%}{{- '<think>\\n' -}}{%- endif -%}\n"
    "{%- endif -%}\n";

/* Token list: bytes, merges, then specials (at their real ids when the vocabulary is 27B-sized,
 * else right after the merges), [PAD{i}] everywhere else. */
static int write_vocab(gguf_writer *w, const bs_synth_config *c) {
    const int64_t V = c->n_vocab;
    const bool real_ids = V >= REAL_SPECIAL_BASE + SYNTH_N_SPECIALS;
    const int64_t room = (real_ids ? REAL_SPECIAL_BASE : V - SYNTH_N_SPECIALS) - 256;
    size_t corpus_len;
    const char *corpus = bs_corpus(&corpus_len);
    bs_bpe_vocab bpe;
    uint32_t max_merges = (uint32_t)BS_MIN((int64_t)c->n_merges, room);
    if (bs_bpe_train(corpus, corpus_len, max_merges, &bpe)) return -1;
    /* n_tokens - 256 <= n_merges <= room, so the specials always fit */
    const int64_t special_base = real_ids ? REAL_SPECIAL_BASE : (int64_t)bpe.n_tokens;
    char **tok = bs_xcalloc((size_t)V, sizeof *tok);
    int32_t *type = bs_xmalloc((size_t)V * sizeof *type);
    for (int64_t i = 0; i < V; i++) {
        if (i < bpe.n_tokens) {
            tok[i] = bpe.tokens[i];
            type[i] = TOKEN_NORMAL;
        } else if (i >= special_base && i < special_base + SYNTH_N_SPECIALS) {
            tok[i] = (char *)specials[i - special_base];
            type[i] = TOKEN_CONTROL;
        } else {
            char pad[32];
            snprintf(pad, sizeof pad, "[PAD%lld]", (long long)i);
            tok[i] = bs_xstrdup(pad);
            type[i] = TOKEN_UNUSED;
        }
    }
    gguf_w_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_w_set_str(w, "tokenizer.ggml.pre", "qwen35");
    gguf_w_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, (uint64_t)V);
    gguf_w_set_arr_i32(w, "tokenizer.ggml.token_type", type, (uint64_t)V);
    gguf_w_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)bpe.merges, bpe.n_merges);
    gguf_w_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)(special_base + 2));      /* <|im_end|> */
    gguf_w_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)special_base);       /* <|endoftext|> */
    gguf_w_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    gguf_w_set_str(w, "tokenizer.chat_template", chat_template);
    for (int64_t i = bpe.n_tokens; i < V; i++)
        if (type[i] == TOKEN_UNUSED) free(tok[i]);
    free(tok);
    free(type);
    bs_bpe_vocab_free(&bpe);
    return 0;
}

static void write_qwen35_keys(gguf_writer *w, const bs_synth_config *c) {
    gguf_w_set_u32(w, "qwen35.block_count", (uint32_t)c->n_layer);
    gguf_w_set_u32(w, "qwen35.context_length", (uint32_t)c->n_ctx);
    gguf_w_set_u32(w, "qwen35.embedding_length", (uint32_t)c->n_embd);
    gguf_w_set_u32(w, "qwen35.feed_forward_length", (uint32_t)c->n_ff);
    gguf_w_set_u32(w, "qwen35.attention.head_count", (uint32_t)c->n_head);
    gguf_w_set_u32(w, "qwen35.attention.head_count_kv", (uint32_t)c->n_head_kv);
    gguf_w_set_u32(w, "qwen35.attention.key_length", (uint32_t)c->head_dim);
    gguf_w_set_u32(w, "qwen35.attention.value_length", (uint32_t)c->head_dim);
    gguf_w_set_f32(w, "qwen35.attention.layer_norm_rms_epsilon", c->rms_eps);
    gguf_w_set_f32(w, "qwen35.rope.freq_base", c->rope_theta);
    gguf_w_set_u32(w, "qwen35.rope.dimension_count", (uint32_t)c->rope_dim);
    gguf_w_set_arr_i32(w, "qwen35.rope.dimension_sections", c->rope_sections, 4);
    gguf_w_set_u32(w, "qwen35.ssm.conv_kernel", (uint32_t)c->conv_kernel);
    gguf_w_set_u32(w, "qwen35.ssm.state_size", (uint32_t)c->ssm_head_dim);
    gguf_w_set_u32(w, "qwen35.ssm.group_count", (uint32_t)c->ssm_k_heads);
    gguf_w_set_u32(w, "qwen35.ssm.time_step_rank", (uint32_t)c->ssm_v_heads);
    gguf_w_set_u32(w, "qwen35.ssm.inner_size", (uint32_t)(c->ssm_v_heads * c->ssm_head_dim));
    gguf_w_set_u32(w, "qwen35.full_attention_interval", (uint32_t)c->attn_interval);
}

static void write_dspark_keys(gguf_writer *w, const bs_synth_config *c) {
    gguf_w_set_u32(w, "dspark.block_count", (uint32_t)c->n_layer);
    gguf_w_set_u32(w, "dspark.context_length", (uint32_t)c->n_ctx);
    gguf_w_set_u32(w, "dspark.embedding_length", (uint32_t)c->n_embd);
    gguf_w_set_u32(w, "dspark.feed_forward_length", (uint32_t)c->n_ff);
    gguf_w_set_u32(w, "dspark.attention.head_count", (uint32_t)c->n_head);
    gguf_w_set_u32(w, "dspark.attention.head_count_kv", (uint32_t)c->n_head_kv);
    gguf_w_set_u32(w, "dspark.attention.key_length", (uint32_t)c->head_dim);
    gguf_w_set_u32(w, "dspark.attention.value_length", (uint32_t)c->head_dim);
    gguf_w_set_f32(w, "dspark.attention.layer_norm_rms_epsilon", c->rms_eps);
    gguf_w_set_f32(w, "dspark.rope.freq_base", c->rope_theta);
    gguf_w_set_u32(w, "dspark.vocab_size", (uint32_t)c->n_vocab);
    gguf_w_set_u32(w, "dspark.dspark.block_size", (uint32_t)c->block_size);
    gguf_w_set_u32(w, "dspark.dspark.mask_token_id", (uint32_t)c->mask_id);
    gguf_w_set_arr_i32(w, "dspark.dspark.target_layers", c->taps, (uint64_t)c->n_taps);
    gguf_w_set_u32(w, "dspark.dspark.markov_rank", (uint32_t)c->markov_rank);
    gguf_w_set_bool(w, "dspark.dspark.confidence_head", true);
    gguf_w_set_bool(w, "dspark.dspark.confidence_head_with_markov", true);
    gguf_w_set_bool(w, "dspark.dspark.log_snr_conditioning", true);
    gguf_w_set_f32(w, "dspark.dspark.min_log_snr", -9.0f);
    gguf_w_set_f32(w, "dspark.dspark.max_log_snr", 9.0f);
    gguf_w_set_str(w, "tokenizer.ggml.model", "none");   /* drafters ship no tokenizer */
}

int synth_write_metadata(gguf_writer *w, const bs_synth_config *c, const synth_plan *p) {
    bool quantized = false;
    for (size_t i = 0; i < p->n; i++) quantized |= bs_type_get(p->t[i].type)->is_quantized;
    gguf_w_set_str(w, "general.architecture", c->arch == BS_SYNTH_QWEN35 ? "qwen35" : "dspark");
    gguf_w_set_str(w, "general.name", c->name);
    if (c->arch == BS_SYNTH_QWEN35) write_qwen35_keys(w, c);
    else write_dspark_keys(w, c);
    synth_fold_keys(w, c, p);
    if (quantized) gguf_w_set_u32(w, "general.quantization_version", 2);
    gguf_w_set_u32(w, "general.file_type", bs_ftype_of(c->matrix_type));
    if (c->arch == BS_SYNTH_QWEN35) return write_vocab(w, c);
    return 0;
}
