/* cli_opts_table.c: every option of every command that parses options (cli_opts.h), in the
 * order help prints them. A row per option; an option whose range or meaning differs between
 * commands has a row per meaning, with the same id. */
#include "cli/cli_opts.h"
#include "dspark/dspark.h"

#include <stdint.h>

#define ALL_GEN (CMD_GEN | CMD_SERVE)
#define FLAG(id, c, names, help) {id, c, names, NULL, CLI_FLAG, 0, 0, 0, 0, NULL, NULL, help, NULL}
#define INT(id, c, names, meta, lo, hi, def, help) {id, c, names, meta, CLI_INT, lo, hi, 0, 0, NULL, def, help, NULL}
#define INTA(id, c, names, meta, lo, hi, def, help) {id, c, names, meta, CLI_INT_AUTO, lo, hi, 0, 0, NULL, def, help, NULL}
#define FLT(id, c, names, meta, lo, hi, def, help) {id, c, names, meta, CLI_FLOAT, 0, 0, lo, hi, NULL, def, help, NULL}
#define STR(id, c, names, meta, def, help) {id, c, names, meta, CLI_STR, 0, 0, 0, 0, NULL, def, help, NULL}
#define STRX(id, c, names, meta, ex, def, help) {id, c, names, meta, CLI_STR, 0, 0, 0, 0, NULL, def, help, ex}
#define STR2(id, c, names, meta, help) {id, c, names, meta, CLI_STR2, 0, 0, 0, 0, NULL, NULL, help, NULL}
#define CHOICE(id, c, names, choices, def, help) {id, c, names, choices, CLI_CHOICE, 0, 0, 0, 0, choices, def, help, NULL}
#define SECTION(c, title) {OPT_NONE, c, NULL, NULL, CLI_SECTION, 0, 0, 0, 0, NULL, NULL, title, NULL}

#define MODEL_HELP "qwen35 GGUF (Bonsai-27B Q1_0, Ternary-Bonsai Q2_0, ...)"
#define DEVICE_HELP "auto, cpu, vulkan or vulkan:N ('bitspark devices')"
#define NORMALIZE_HELP \
    "Unicode normalization of the text before tokenization: auto (the\n" \
    "model's; NFC for Qwen vocabularies, as their tokenizer.json says) |\n" \
    "none (llama.cpp's token ids) | nfc | nfd | nfkc | nfkd"

const cli_opt cli_opts[] = {
    /* ---- run, chat: what to generate ---- */
    SECTION(CMD_RUN | CMD_CHAT, "generation"),
    STR(OPT_PROMPT, CMD_RUN, "-p, --prompt", "TEXT", NULL, "prompt text"),
    STR(OPT_FILE, CMD_RUN, "-f, --file", "FILE", NULL, "read the prompt from a file ('-': stdin)"),
    INT(OPT_N_PREDICT, CMD_RUN, "-n, --n-predict", "N", -1, INT32_MAX, "-1",
        "tokens to generate, -1 = until end of generation"),
    INT(OPT_N_PREDICT, CMD_CHAT, "-n, --n-predict", "N", -1, INT32_MAX, "-1",
        "max tokens per reply, -1 = until end of generation"),
    FLAG(OPT_CHAT, CMD_RUN, "--chat", "wrap the prompt as a user message in the chat template"),
    FLAG(OPT_NO_THINK, CMD_RUN, "--no-think", "with --chat: the enable_thinking=false form"),
    FLAG(OPT_NO_THINK, CMD_CHAT, "--no-think", "thinking off (the template's enable_thinking=false form)"),
    STR(OPT_SYSTEM, CMD_RUN, "-sys, --system", "TEXT", NULL, "with --chat: system message"),
    STR(OPT_SYSTEM, CMD_CHAT, "-sys, --system", "TEXT", NULL, "system message"),
    FLAG(OPT_STATS, CMD_CHAT, "--stats", "timings after each reply (stderr)"),
    FLAG(OPT_NO_REUSE, CMD_CHAT, "--no-reuse", "re-evaluate the whole conversation every turn (for checks)"),
    FLAG(OPT_QUIET, CMD_RUN | CMD_CHAT, "-q, --quiet", "no logs or timing lines on stderr"),
    FLAG(OPT_VERBOSE, CMD_RUN | CMD_CHAT, "-v, --verbose", "also log the prompt as rendered and tokenized"),

    /* ---- antidoom ---- */
    SECTION(CMD_AD_MINE, "antidoom mine: one pair per prompt whose completion falls into a loop"),
    STR(OPT_PROMPTS, CMD_AD_MINE, "--prompts", "FILE", NULL,
        "one prompt per line (raw text, a JSON string, or a JSON object\n"
        "with \"prompt\"/\"text\"/\"context\"/\"conversations\")"),
    STR(OPT_OUTPUT, CMD_AD_MINE, "-o, --output, --out", "FILE", NULL, "pairs as JSON lines (antidoom's format + the ids used)"),
    INT(OPT_N_PREDICT, CMD_AD_MINE, "-n, --n-predict", "N", 1, 1 << 20, "512", "max tokens per completion"),
    FLAG(OPT_GENERATE_PRIMES, CMD_AD_MINE, "--generate-primes",
         "first turn each prompt into a priming context: the prompt,\n"
         "then its own greedy continuation cut at a sentence end,\n"
         "repeated --prime-copies times"),
    INT(OPT_PRIME_TOKENS, CMD_AD_MINE, "--prime-tokens", "N", 1, 1 << 20, "24", "tokens generated for the primed phrase"),
    INT(OPT_PRIME_COPIES, CMD_AD_MINE, "--prime-copies", "K", 1, 1 << 20, "3", "copies of the phrase in the priming context"),
    STR(OPT_PRIMES_OUT, CMD_AD_MINE, "--primes-out", "FILE", NULL, "also write the priming contexts as JSON lines"),
    INT(OPT_CHOSEN_TOP_K, CMD_AD_MINE, "--chosen-top-k", "K", 1, 1 << 20, "20", "candidates from the top of the distribution"),
    FLT(OPT_CHOSEN_MIN_P, CMD_AD_MINE, "--chosen-min-p", "P", 0, 1, "0.01", "floor relative to the best remaining candidate"),
    INT(OPT_CHOSEN_MAX, CMD_AD_MINE, "--chosen-max", "N", 1, 1 << 20, "20", "chosen tokens per pair"),
    INT(OPT_CHOSEN_MIN_CHARS, CMD_AD_MINE, "--chosen-min-chars", "N", 0, 1 << 20, "1", "min stripped decoded length"),
    FLAG(OPT_CHOSEN_REQUIRE_ALNUM, CMD_AD_MINE, "--chosen-require-alnum", "chosen text must contain a letter or digit"),
    SECTION(CMD_AD_EVAL, "antidoom eval: chosen-win (or loop) rate of a model"),
    STR(OPT_PAIRS, CMD_AD_EVAL, "--pairs", "FILE", NULL,
        "pairs as antidoom writes them (tokens as raw vocabulary strings;\n"
        "context_ids/rejected_id/chosen_ids are used when present)"),
    FLAG(OPT_JSON, CMD_AD_EVAL, "--json", "print {\"pairs\": [{\"chosen_win\": x, ...}], \"chosen_win\": mean}"),
    FLAG(OPT_LOOP_RATE, CMD_AD_EVAL, "--loop-rate", "instead: the share of --prompts completions that fall into a loop\n(with --temps, -n, --seed)"),
    STR(OPT_PROMPTS, CMD_AD_EVAL, "--prompts", "FILE", NULL, "with --loop-rate: one prompt per line"),
    STRX(OPT_TEMPS, CMD_AD_EVAL, "--temps", "T,T,...", "0,0.5", "0,0.3,0.7", "temperatures; 0 is greedy"),
    INT(OPT_N_PREDICT, CMD_AD_EVAL, "-n, --n-predict", "N", 1, 1 << 24, "256", "max tokens per completion"),

    /* ---- serve ---- */
    SECTION(CMD_SERVE, "server"),
    STR(OPT_HOST, CMD_SERVE, "--host", "ADDR", "127.0.0.1", "address to listen on"),
    INT(OPT_PORT, CMD_SERVE, "--port", "N", 0, 65535, "8080", "port, 0 = any free one"),
    INT(OPT_PARALLEL, CMD_SERVE, "-np, --parallel", "N", -1, 256, "1",
        "slots: requests generated at the same time, their decode\n"
        "steps batched into one pass through the weights (-1: 4,\n"
        "llama-server's auto)"),
    INT(OPT_QUEUE, CMD_SERVE, "--queue", "N", 0, 1 << 20, "16 x slots", "requests that may wait for a slot; more get 503"),
    INT(OPT_N_PREDICT, CMD_SERVE, "-n, --n-predict, --predict", "N", -1, 1 << 30, "32768",
        "tokens one request may generate at most, whatever its\n"
        "max_tokens (-1 and ignore_eos too), and the length of\n"
        "requests that set none; /props reports it (-1: the default)"),
    STR(OPT_API_KEY, CMD_SERVE, "--api-key", "KEY", NULL, "require 'Authorization: Bearer KEY' (not for /health and /)"),
    STRX(OPT_API_KEY_FILE, CMD_SERVE, "--api-key-file", "FILE", "/dev/null", NULL,
        "the same with the key read from FILE (first line; the key\n"
        "then does not show in the process list)"),
    STR(OPT_ALIAS, CMD_SERVE, "-a, --alias", "NAME[,NAME]", "the file name",
        "model names in /v1/models (repeatable); the first is the id"),
    STR(OPT_TAGS, CMD_SERVE, "--tags", "TAG[,TAG]", NULL, "tags listed in /v1/models"),
    INT(OPT_BODY_LIMIT, CMD_SERVE, "--body-limit", "BYTES", 1024, 1L << 32, "8 MiB", "largest request body; more is 413"),
    INT(OPT_MAX_CONNECTIONS, CMD_SERVE, "--max-connections", "N", 4, 65536, "2048",
        "simultaneous connections; connections cost a socket,\n"
        "not a thread: a few HTTP threads serve them all"),
    INT(OPT_HTTP_THREADS, CMD_SERVE, "--http-threads, --threads-http", "N", 1, 64, "4", "HTTP worker threads"),
    INT(OPT_BODY_BUDGET, CMD_SERVE, "--body-budget", "BYTES", 1024, 1L << 40, "--body-limit + 1 MiB",
        "request bodies being received at once, in total; more\nwait"),
    INT(OPT_IMAGE_BUDGET, CMD_SERVE, "--image-budget", "BYTES", 1L << 20, 1L << 40, "512 MiB",
        "preprocessed image pixels that requests not yet in a slot\n"
        "may hold, in total; an image past it is 503"),
    FLAG(OPT_NO_WEBUI, CMD_SERVE, "--no-webui", "no chat page at /"),
    STR(OPT_MMPROJ, CMD_SERVE, "-mm, --mmproj", "FILE", NULL,
        "vision projector (mmproj GGUF): chat messages may hold\n"
        "image_url parts (data: URLs); /props says modalities.vision"),
    FLAG(OPT_EMBEDDINGS, CMD_SERVE, "--embeddings, --embedding, --embd",
         "serve POST /v1/embeddings (the last layer after the final norm,\n"
         "pooled and L2-normalized)"),
    CHOICE(OPT_POOLING, CMD_SERVE, "--pooling", "mean|last|none", "mean",
           "how embeddings pool the tokens (none: a vector per token)"),
    INT(OPT_EMBD_NORMALIZE, CMD_SERVE, "--embd-normalize", "N", -1, 64, "2",
        "embeddings' normalization when a request sets none: -1 none,\n"
        "0 max-abs (int16 range), 1 taxicab, 2 L2, p > 2 the p-norm"),
    FLAG(OPT_QUIET, CMD_SERVE, "-q, --quiet", "errors only on stderr"),
    FLAG(OPT_VERBOSE, CMD_SERVE, "-v, --verbose", "more logging"),
    SECTION(CMD_SERVE, "llama-server's slot, adapter, media and idle options"),
    STRX(OPT_SLOT_SAVE_PATH, CMD_SERVE, "--slot-save-path", "DIR", "/tmp", NULL,
         "POST /slots/{id}?action=save|restore|erase {\"filename\"}:\n"
         "a slot's tokens and state as a file in DIR"),
    FLAG(OPT_NO_SLOTS, CMD_SERVE, "--no-slots", "GET /slots and the slot actions answer 501"),
    FLAG(OPT_SLOTS, CMD_SERVE, "--slots", "GET /slots and the slot actions on (the default)"),
    FLAG(OPT_LORA_INIT_WITHOUT_APPLY, CMD_SERVE, "--lora-init-without-apply",
         "load the --lora adapters at scale 0 (POST /lora-adapters\n"
         "or a request's \"lora\" turn them on)"),
    STRX(OPT_MEDIA_PATH, CMD_SERVE, "--media-path", "DIR", "/tmp", NULL,
         "image_url file://NAME reads DIR/NAME (nothing outside DIR)"),
    FLT(OPT_SLEEP_IDLE, CMD_SERVE, "--sleep-idle-seconds", "N", 0, 1e7, "0",
        "after N idle seconds free the slots' memory (KV cache and\n"
        "states) and the model's weights; the next request brings\n"
        "them back (/props is_sleeping)"),
    SECTION(CMD_SERVE, "llama-server's other options, taken for drop-in use (docs/server.md)"),
    STRX(OPT_NGL, CMD_SERVE, "-ngl, --n-gpu-layers, --gpu-layers", "N", "99", NULL,
        "0: --device cpu; any other count, auto or all: every layer on\n"
        "the device --device picks (no partial offload)"),
    INT(OPT_REASONING_BUDGET, CMD_SERVE, "--reasoning-budget", "N", -1, INT32_MAX, "-1",
        "0: thinking off in requests that do not ask for it, -1: the\n"
        "template's default (a budget > 0 is not enforced: said so)"),
    CHOICE(OPT_REASONING_FORMAT, CMD_SERVE, "--reasoning-format", "auto|deepseek|none|deepseek-legacy", "auto",
           "requests' default reasoning_format"),
    STRX(OPT_TEMPLATE_KWARGS, CMD_SERVE, "--chat-template-kwargs", "JSON", "{\"enable_thinking\": false}", NULL,
         "requests' default chat_template_kwargs (the templates here read\n"
         "enable_thinking)"),
    INT(OPT_HTTP_TIMEOUT, CMD_SERVE, "-to, --timeout", "S", 1, 86400, "600", "an idle connection is closed after S seconds"),
    FLAG(OPT_NO_CONTEXT_SHIFT, CMD_SERVE, "--no-context-shift", "no context shift (the default)"),
    INT(OPT_VERBOSITY, CMD_SERVE, "-lv, --verbosity, --log-verbosity", "N", 0, 100, "3",
        "llama.cpp's levels: <= 1 errors only (-q), >= 4 more (-v)"),
    FLAG(OPT_LOG_DISABLE, CMD_SERVE, "--log-disable", "errors only (-q)"),
    FLAG(OPT_COMPAT_NOOP, CMD_SERVE, "--jinja, --no-jinja", "ignored: the model's template is rendered natively"),
    FLAG(OPT_COMPAT_NOOP, CMD_SERVE, "-cb, --cont-batching, -nocb, --no-cont-batching",
         "ignored: slots are always batched together"),
    FLAG(OPT_COMPAT_NOOP, CMD_SERVE, "--metrics, --props", "ignored: /metrics is always served; POST /props is 501"),
    FLAG(OPT_COMPAT_NOOP, CMD_SERVE, "--mlock, --no-warmup, --swa-full, -kvu, --kv-unified, --no-kv-offload",
         "ignored: no meaning for this engine"),
    FLAG(OPT_COMPAT_NOOP, CMD_SERVE, "--mmproj-offload, --no-mmproj-offload", "ignored: the projector runs on the model's device"),
    FLAG(OPT_COMPAT_NOOP, CMD_SERVE, "--no-mmproj, --spm-infill, --no-perf",
         "ignored: no meaning for this engine (no --mmproj is no projector)"),
    FLAG(OPT_COMPAT_NOOP, CMD_SERVE, "-sp, --special", "ignored: not supported here (answers hold no special tokens)"),
    STR(OPT_COMPAT_NOOP, CMD_SERVE, "-cram, --cache-ram, -ctxcp, --ctx-checkpoints", "X", NULL,
        "ignored: the prompt cache and checkpoints are this engine's own"),
    STR(OPT_COMPAT_NOOP, CMD_SERVE, "--fit, --spec-type", "X", NULL,
        "ignored: memory is this engine's own; speculation is DSpark's"),
    STR(OPT_COMPAT_NOOP, CMD_SERVE, "-r, --reverse-prompt", "TEXT", NULL, "ignored: requests send their stop strings"),
    CHOICE(OPT_REASONING, CMD_SERVE, "-rea, --reasoning", "on|off|auto", "auto",
           "requests' thinking default: on, off, or the template's (auto)"),
    STRX(OPT_SAMPLERS, CMD_SERVE, "--samplers", "NAMES", "top_k;temperature", NULL,
         "the stages of requests that send no samplers, ';'-separated,\n"
         "in their order"),
    STRX(OPT_SAMPLERS, CMD_SERVE, "--sampling-seq, --sampler-seq", "LETTERS", "kt", NULL,
         "the same as llama.cpp's letters (e d s k y p m x t)"),
    STR(OPT_LOG_FILE, CMD_SERVE, "--log-file", "FILE", NULL, "the log (stderr) to FILE, appended"),
    CHOICE(OPT_COMPAT_NOOP, CMD_SERVE, "-fa, --flash-attn", "on|off|auto", NULL, "ignored: attention is always fused here"),
    CHOICE(OPT_COMPAT_NOOP, CMD_SERVE, "-ctk, --cache-type-k, -ctv, --cache-type-v",
           "f32|f16|bf16|q8_0|q4_0|q4_1|iq4_nl|q5_0|q5_1", NULL, "ignored: the KV cache has this engine's own format"),
    INT(OPT_COMPAT_NOOP, CMD_SERVE, "-b, --batch-size, -ub, --ubatch-size", "N", 1, INT32_MAX, NULL,
        "ignored: prompts are evaluated in this engine's chunks"),
    INT(OPT_COMPAT_NOOP, CMD_SERVE, "-tb, --threads-batch", "N", -1, 512, NULL, "ignored: -t sets the threads of every pass"),
    INT(OPT_COMPAT_NOOP, CMD_SERVE, "--cache-reuse", "N", 0, INT32_MAX, NULL,
        "ignored: no chunk reuse by KV shifting here (a slot's cached\nprefix is reused)"),
    STR(OPT_COMPAT_NOOP, CMD_SERVE, "-sm, --split-mode, -mg, --main-gpu, --numa", "X", NULL,
        "ignored: one device (--device vulkan:N picks it)"),
    STR(OPT_COMPAT_NOOP, CMD_SERVE, "-dt, --defrag-thold, -sps, --slot-prompt-similarity", "X", NULL,
        "ignored: no meaning for this engine"),
    STR(OPT_COMPAT_NOOP, CMD_SERVE, "--draft-min, --draft-p-min, -ngld, --gpu-layers-draft", "X", NULL,
        "ignored: the drafter's depth is --draft-max (auto by cost and\nacceptance); it runs on the model's device"),

    SECTION(CMD_SERVE, "behind a load balancer (see deploy/README.md)"),
    STR(OPT_REPLICA_ID, CMD_SERVE, "--replica-id", "NAME", NULL, "name this replica in an X-Replica-Id header on every answer"),
    FLT(OPT_DRAIN_TIMEOUT, CMD_SERVE, "--drain-timeout", "S", 0, 86400, "30",
        "after SIGTERM/SIGINT: refuse new generation requests (503,\n"
        "Retry-After), let in-flight ones finish for at most S seconds,\n"
        "then cancel the rest (streams end with finish_reason\n"
        "\"shutdown\", waiting answers get 503) and exit 0; a second\n"
        "signal cancels at once"),
    SECTION(CMD_SERVE, "browser safety"),
    STR(OPT_CORS, CMD_SERVE, "--cors", "ORIGIN[,...]", NULL, "let these origins (or '*': any) call the API from a page"),
    STR(OPT_ALLOWED_HOSTS, CMD_SERVE, "--allowed-hosts", "H[,...]", NULL, "more Host names to answer (e.g. a name for this machine)"),
    FLAG(OPT_SPECIAL_IN_MESSAGES, CMD_SERVE, "--special-in-messages",
         "tokenize control tokens typed in message content as control\n"
         "tokens (default: as plain text; the template's own\n"
         "<|im_start|> ... stay special)"),

    /* ---- images (run, chat) ---- */
    SECTION(CMD_RUN | CMD_CHAT, "images (Qwen3.5 vision projector; on the model's device)"),
    STR(OPT_MMPROJ, CMD_RUN | CMD_CHAT, "--mmproj", "F", NULL, "the vision projector (mmproj GGUF) matching the model"),
    STR(OPT_IMAGE, CMD_RUN | CMD_CHAT, "--image", "PATH", NULL,
        "an image (PNG, JPEG or binary PPM), repeatable: the images go\n"
        "before the text of the (first) user message"),

    /* ---- model and session (cli_gen, serve) ---- */
    SECTION(ALL_GEN, "model and session"),
    STR(OPT_MODEL, ALL_GEN, "-m, --model", "FILE", NULL, MODEL_HELP),
    INT(OPT_THREADS, ALL_GEN, "-t, --threads", "N", -1, 512, "all cores", "threads (-1: all cores)"),
    INT(OPT_CTX, CMD_GEN, "-c, --ctx, --ctx-size", "N", 1, 1 << 24, "4096, capped by the model", "context size in tokens"),
    INT(OPT_CTX, CMD_SERVE, "-c, --ctx, --ctx-size", "N", 0, 1 << 24, "4096, capped by the model (0: the model's)",
        "context per slot in tokens"),
    FLAG(OPT_NO_MMAP, ALL_GEN, "--no-mmap", "read the model into memory instead of mapping it"),
    STR(OPT_DEVICE, ALL_GEN, "--device, -dev", "D", "auto", DEVICE_HELP " (none: cpu)"),
    CHOICE(OPT_NORMALIZE, ALL_GEN, "--tokenizer-normalize", "auto|none|nfc|nfd|nfkc|nfkd", "auto",
           NORMALIZE_HELP),
    FLAG(OPT_CONTEXT_SHIFT, ALL_GEN, "--context-shift",
         "a full context drops the older half of what follows the kept\n"
         "start and re-evaluates the rest (every kept position: the\n"
         "recurrent state cannot forget), instead of stopping"),
    INT(OPT_KEEP, ALL_GEN, "--keep", "N", -1, INT32_MAX, "0", "tokens at the start a context shift keeps (-1: all it can)"),

    SECTION(ALL_GEN, "sampling (llama.cpp order and defaults; serve: the defaults of requests)"),
    FLT(OPT_TEMP, ALL_GEN, "--temp", "T", 0, 0, "0.8", "temperature, <= 0 is greedy"),
    INT(OPT_TOP_K, ALL_GEN, "--top-k", "K", -1, INT32_MAX, "40", "0 = off"),
    FLT(OPT_TOP_P, ALL_GEN, "--top-p", "P", 0, 1, "0.95", "1 = off"),
    FLT(OPT_MIN_P, ALL_GEN, "--min-p", "P", 0, 1, "0.05", "0 = off"),
    FLT(OPT_REPEAT_PENALTY, ALL_GEN, "--repeat-penalty", "X", 0, 0, "1.0", "1 = off"),
    INT(OPT_REPEAT_LAST_N, ALL_GEN, "--repeat-last-n", "N", -1, INT32_MAX, "64", "window of the penalties, -1 = whole context"),
    FLT(OPT_PRESENCE_PENALTY, ALL_GEN, "--presence-penalty", "X", 0, 0, "0", ""),
    FLT(OPT_FREQUENCY_PENALTY, ALL_GEN, "--frequency-penalty", "X", 0, 0, "0", ""),
    FLT(OPT_DRY_MULTIPLIER, ALL_GEN, "--dry-multiplier", "X", 0, 0, "0", "0 = DRY off"),
    FLT(OPT_DRY_BASE, ALL_GEN, "--dry-base", "X", 0, 0, "1.75", ""),
    INT(OPT_DRY_ALLOWED_LENGTH, ALL_GEN, "--dry-allowed-length", "N", 0, INT32_MAX, "2", ""),
    INT(OPT_DRY_PENALTY_LAST_N, ALL_GEN, "--dry-penalty-last-n", "N", -1, INT32_MAX, "-1", "-1 = whole context"),
    STR(OPT_DRY_BREAKER, ALL_GEN, "--dry-sequence-breaker", "S", "\\n : \" *", "repeatable; 'none' clears"),
    FLT(OPT_TOP_N_SIGMA, ALL_GEN, "--top-nsigma", "N", 0, 0, "-1", "keep logits within N standard deviations of the best, <= 0 = off"),
    FLT(OPT_TYPICAL, ALL_GEN, "--typical", "P", 0, 1, "1.0", "locally typical sampling, 1 = off"),
    FLT(OPT_XTC_PROBABILITY, ALL_GEN, "--xtc-probability", "P", 0, 1, "0", "XTC: the chance the top tokens are excluded, 0 = off"),
    FLT(OPT_XTC_THRESHOLD, ALL_GEN, "--xtc-threshold", "P", 0, 1, "0.1", "XTC: ... those at least this probable (> 0.5 = off)"),
    FLT(OPT_DYNATEMP_RANGE, ALL_GEN, "--dynatemp-range", "X", 0, 0, "0", "dynamic temperature: temp +- X by the entropy, 0 = off"),
    FLT(OPT_DYNATEMP_EXP, ALL_GEN, "--dynatemp-exp", "X", 0, 0, "1.0", "dynamic temperature: the entropy's exponent"),
    INT(OPT_MIROSTAT, ALL_GEN, "--mirostat", "N", 0, 2, "0", "Mirostat 1 or 2 (bias, temperature, Mirostat only), 0 = off"),
    FLT(OPT_MIROSTAT_LR, ALL_GEN, "--mirostat-lr", "ETA", 0, 0, "0.1", "Mirostat's learning rate"),
    FLT(OPT_MIROSTAT_ENT, ALL_GEN, "--mirostat-ent", "TAU", 0, 0, "5.0", "Mirostat's target surprise, in bits"),
    STRX(OPT_GEN_SAMPLERS, CMD_RUN | CMD_CHAT, "--samplers", "NAMES", "top_k;temperature", NULL,
         "the stages that run, ';'-separated, in their order\n(llama.cpp's names; default: the whole chain)"),
    STRX(OPT_GEN_SAMPLERS, CMD_RUN | CMD_CHAT, "--sampling-seq, --sampler-seq", "LETTERS", "tkpm", NULL,
         "the same as llama.cpp's letters (e d s k y p m x t)"),
    STRX(OPT_LOGIT_BIAS, ALL_GEN, "-l, --logit-bias", "ID(+|-)X", "15043-inf", NULL, "e.g. 15043+1 or 15043-inf (ban)"),
    FLAG(OPT_IGNORE_EOS, ALL_GEN, "--ignore-eos", "keep generating past end-of-generation tokens"),
    INT(OPT_SEED, ALL_GEN & ~CMD_AD_EVAL, "-s, --seed", "S", -1, INT64_MAX, "-1", "random seed, -1 = from the clock (printed)"),
    INT(OPT_SEED, CMD_AD_EVAL, "-s, --seed", "S", -1, INT64_MAX, "0",
        "completion i at each temperature uses seed S + i; -1 = from the clock"),
    STR(OPT_LORA, ALL_GEN, "--lora", "FILE[:SCALE][,...]", NULL,
        "LoRA adapter (llama.cpp GGUF or PEFT safetensors), applied at\n"
        "run time, repeatable or a comma list: y = W x + SCALE * alpha/r\n"
        "* B (A x) (SCALE 1)"),
    STR2(OPT_LORA_SCALED, ALL_GEN, "--lora-scaled", "FILE S", "the same with the scale as a separate argument\n"
         "(or one value FILE:SCALE[,...], as llama-server's newer form)"),

    SECTION(ALL_GEN, "speculative decoding (DSpark)"),
    STR(OPT_MODEL_DRAFT, ALL_GEN, "-md, --model-draft", "F", NULL,
        "DSpark drafter (.gguf, or safetensors + config.json); temperature\n"
        "0 output is unchanged (serve: a request's \"draft_max\": 0 turns it off)"),
    INTA(OPT_DRAFT_MAX, ALL_GEN, "--draft-max, --draft", "N|auto", 0, BS_DSPARK_MAX_BLOCK, "auto",
         "drafts verified per round, 0..block size (needs -md); auto\n"
         "measures the cost of each verify width and drafter block once per\n"
         "machine, model pair and thread count, and keeps them with the\n"
         "acceptance and probe cost the last run ended with in\n"
         "$XDG_CACHE_HOME/bitspark/dspark-costs (or ~/.cache/...);\n"
         "BITSPARK_NO_COST_CACHE=1 measures afresh and keeps nothing"),
    FLAG(OPT_DRAFT_SHARE_EMBD, ALL_GEN, "--draft-share-embeddings",
         "use the target's token_embd / output for the drafter\n"
         "even where they differ (identical ones are always shared)"),
    FLAG(OPT_DRAFT_NO_CONF, ALL_GEN, "--draft-no-conf", "auto depth without the confidence-head trim"),
    INT(OPT_DRAFT_WINDOW, ALL_GEN, "--draft-window", "N", 0, 1 << 24, "0",
        "the drafter attends to its last N context rows only (0:\n"
        "all; caps the drafter's cost at long contexts; changes\n"
        "drafts, never the output)"),

    SECTION(ALL_GEN, "doom-loop guard (antidoom's detector: a span repeating >= R times over >= C chars)"),
    CHOICE(OPT_LOOP_GUARD, ALL_GEN, "--loop-guard", "off|stop|rewind", "off",
           "off | stop (end generation at a loop) | rewind (roll back\n"
           "to the loop's first repeat, ban that token, resample)"),
    INT(OPT_LOOP_MIN_REPEATS, ALL_GEN, "--loop-min-repeats", "R", 2, 1000000, "4", ""),
    INT(OPT_LOOP_MIN_CHARS, ALL_GEN, "--loop-min-chars", "C", 1, 100000000, "60", ""),
    INT(OPT_LOOP_MAX_PERIOD, ALL_GEN, "--loop-max-period", "P", 1, 1000000, "1024", "longest period looked for, in characters"),
    INT(OPT_LOOP_MAX_REWINDS, ALL_GEN, "--loop-max-rewinds", "N", 0, 1000000, "8", "rewinds per generation, then stop"),
    INT(OPT_LOOP_CKPT_EVERY, ALL_GEN, "--loop-ckpt-every", "N", 1, 1000000, "64", "rewind: tokens between state checkpoints"),
    INT(OPT_LOOP_CKPT_COUNT, ALL_GEN, "--loop-ckpt-count", "N", 0, 4096, "8", "rewind: checkpoints kept"),

    /* ---- tokenize, detokenize ---- */
    SECTION(CMD_TOKENIZE | CMD_DETOKENIZE, "options"),
    STR(OPT_MODEL, CMD_TOKENIZE | CMD_DETOKENIZE, "-m, --model", "MODEL", NULL,
        "GGUF file (only its tokenizer metadata is read)"),
    STR(OPT_FILE, CMD_TOKENIZE, "-f, --file", "FILE", NULL, "tokenize the contents of FILE ('-': stdin)"),
    FLAG(OPT_SPECIAL, CMD_TOKENIZE, "--special",
         "parse special tokens such as <|im_start|> in the text; without it\n"
         "they are tokenized as plain text"),
    FLAG(OPT_JSON, CMD_TOKENIZE, "--json", "print a JSON array of ids instead"),
    FLAG(OPT_PIECES, CMD_TOKENIZE, "--pieces", "print one 'id<TAB>piece' line per token (piece JSON-escaped)"),
    FLAG(OPT_JSONL, CMD_TOKENIZE, "--jsonl",
         "batch mode: each line of stdin (or FILE) is one JSON string; each\n"
         "gives one output line, the JSON array of its ids. A line that is\n"
         "not a JSON string of valid UTF-8 gives {\"error\": \"line N: ...\"}\n"
         "on its output line (so output line N always answers input line\n"
         "N), the rest go on, and the exit status is 1"),
    CHOICE(OPT_NORMALIZE, CMD_TOKENIZE, "--tokenizer-normalize", "auto|none|nfc|nfd|nfkc|nfkd", "auto",
           NORMALIZE_HELP),
    FLAG(OPT_NO_SPECIAL, CMD_DETOKENIZE, "--no-special", "print control tokens such as <|im_end|> as nothing"),

    /* ---- logits ---- */
    SECTION(CMD_LOGITS, "options"),
    STR(OPT_MODEL, CMD_LOGITS, "-m, --model", "FILE", NULL, MODEL_HELP),
    STR(OPT_TOKENS, CMD_LOGITS, "--tokens", "ID,ID,...", NULL, "the token ids"),
    STR(OPT_TOKENS_FILE, CMD_LOGITS, "--tokens-file", "F", NULL, "token ids as a JSON list or separated by spaces / commas"),
    STR(OPT_OUTPUT, CMD_LOGITS, "-o, --output, --out", "FILE", NULL, "the logits: one row of n_vocab float32 per token"),
    INT(OPT_BATCH, CMD_LOGITS, "--batch", "N", 1, 1 << 24, "all", "tokens in the first batch"),
    STR(OPT_TAPS, CMD_LOGITS, "--taps", "L,L,...", NULL, "also capture the residual stream after these layers (0-based)"),
    STR(OPT_TAPS_OUT, CMD_LOGITS, "--taps-out", "F", NULL,
        "where the taps go: one row of (number of taps * n_embd) per token"),
    CHOICE(OPT_KV_TYPE, CMD_LOGITS, "--kv-type", "f16|f32", "f16", "KV cache type"),
    INT(OPT_CTX, CMD_LOGITS, "-c, --ctx, --ctx-size", "N", 1, 1 << 24, "4096, or the token count if larger",
        "context size"),
    INT(OPT_THREADS, CMD_LOGITS, "-t, --threads", "N", 1, 512, "all cores", "threads"),
    STR(OPT_IMAGE_EMBD, CMD_LOGITS, "--image-embd", "F", NULL,
        "image embeddings (rows x n_embd float32, as mmproj-embed writes)\n"
        "evaluated where the token list says <image>: one logits row each"),
    STRX(OPT_IMAGE_GRID, CMD_LOGITS, "--image-grid", "WxH", "4x3", NULL, "the image's grid of merged tokens (W * H = rows of F)"),
    STR(OPT_MMPROJ, CMD_LOGITS, "--mmproj", "F", NULL, "with --image: the vision projector that encodes the image"),
    STR(OPT_IMAGE, CMD_LOGITS, "--image", "IMG", NULL, "instead of --image-embd: an image file (PNG, JPEG, binary PPM)"),
    FLAG(OPT_NO_MMAP, CMD_LOGITS, "--no-mmap", "read the model into memory instead of mapping it"),
    STR(OPT_DEVICE, CMD_LOGITS | CMD_DRAFT_LOGITS, "--device", "D", "auto", DEVICE_HELP),

    /* ---- draft-logits ---- */
    SECTION(CMD_DRAFT_LOGITS, "options"),
    STR(OPT_MODEL_DRAFT, CMD_DRAFT_LOGITS, "-md, --model-draft", "F", NULL,
        "drafter (.gguf, or safetensors file/dir with config.json)"),
    STR(OPT_FEATURES, CMD_DRAFT_LOGITS, "--features", "FILE", NULL, "raw tap rows"),
    INT(OPT_ROWS, CMD_DRAFT_LOGITS, "--rows", "N", 0, 1 << 24, NULL, "how many rows to read from FILE"),
    INT(OPT_ANCHOR, CMD_DRAFT_LOGITS, "--anchor", "ID", 0, INT32_MAX, NULL, "the block's anchor token"),
    INT(OPT_POS, CMD_DRAFT_LOGITS, "--pos", "P", 0, 1 << 30, "N", "position of the anchor (>= N)"),
    STR(OPT_OUTPUT, CMD_DRAFT_LOGITS, "-o, --output, --out", "FILE", NULL,
        "base block logits: block_size rows of n_vocab float32"),
    FLAG(OPT_JSON, CMD_DRAFT_LOGITS, "--json", "print {\"drafts\": [...], \"confidence\": [...]} instead of text"),
    STR(OPT_ROUNDS, CMD_DRAFT_LOGITS, "--rounds", "OPS", NULL,
        "several rounds on one drafter context instead (--anchor and\n"
        "--pos unused): comma-separated +N (append the next N rows of\n"
        "FILE), -N (crop the context to N rows), ID@P (a block with\n"
        "anchor ID at position P); every block's logits go to OUT in\n"
        "order; --json prints {\"rounds\": [{drafts, confidence}, ...]}"),

    /* ---- lora merge, mmproj-embed ---- */
    SECTION(CMD_LORA | CMD_MMPROJ_EMBED, "options"),
    STR(OPT_OUTPUT, CMD_LORA, "-o, --output, --out", "FILE", NULL, "output GGUF"),
    STRX(OPT_TYPE, CMD_LORA, "--type", "T", "q8_0", "each tensor's own type",
        "type of the merged tensors (q1_0, q2_0, q8_0, f16, f32, ...);\n"
        "other tensors are copied as is"),
    FLAG(OPT_QUIET, CMD_LORA, "-q, --quiet", "no report"),
    STR(OPT_MMPROJ, CMD_MMPROJ_EMBED, "--mmproj", "FILE", NULL, "the projector GGUF"),
    STR(OPT_IMAGE, CMD_MMPROJ_EMBED, "--image", "IMG", NULL, "the image file"),
    STR(OPT_OUTPUT, CMD_MMPROJ_EMBED, "-o, --output, --out", "FILE", NULL, "output file (written atomically)"),
    INT(OPT_THREADS, CMD_MMPROJ_EMBED, "-t, --threads", "N", 0, 4096, "0: all cores", "threads"),

    /* ---- synth ---- */
    SECTION(CMD_SYNTH, "options"),
    STRX(OPT_PRESET, CMD_SYNTH, "--preset", "NAME", "drafter-tiny", "tiny", "one of the presets above"),
    STR(OPT_OUTPUT, CMD_SYNTH, "-o, --output, --out", "FILE", NULL, "output GGUF (write big models outside the repository)"),
    FLAG(OPT_DRY_RUN, CMD_SYNTH, "--dry-run, --list",
         "print the tensor table from the same plan the writer uses,\n"
         "one 'name<TAB>type<TAB>ne0[,ne1]<TAB>bytes' line per tensor\n"
         "and '# tensors N bytes B'; writes nothing"),
    STRX(OPT_TYPE, CMD_SYNTH, "--type", "T", "q8_0", NULL,
         "matrix type: f32 f16 bf16 q1_0 q2_0 q2_0_g64 pq2_0 q4_0 q4_1\n"
         "q8_0 q6_k tq1_0 tq2_0 (norms and other vectors stay f32);\n"
         "for drafters this makes every matrix T; projectors: f32 f16 bf16 q8_0"),
    STRX(OPT_EMBD_TYPE, CMD_SYNTH, "--embd-type", "T", "q8_0", "--type", "type of token_embd"),
    STRX(OPT_OUTPUT_TYPE, CMD_SYNTH, "--output-type", "T", "q8_0", "--type", "type of output"),
    STRX(OPT_SSM_AB_TYPE, CMD_SYNTH, "--ssm-ab-type", "T", "q8_0", "--type; bf16 for the ternary preset",
         "type of ssm_alpha / ssm_beta"),
    STRX(OPT_DRAFTER_TYPE, CMD_SYNTH, "--drafter-type", "P", "bf16", NULL,
         "drafter presets: pack q4_1 (token_embd q1_0 or q2_0 as the\n"
         "target's, markov_head_a and log_snr fc bf16, other matrices\n"
         "q4_1), bf16 (every matrix), f32"),
    CHOICE(OPT_VALUES, CMD_SYNTH, "--values", "binary|ternary", NULL,
           "ternary for the q2_0/tq types, binary otherwise; q1_0 is\n"
           "always binary, q2_0 always ternary"),
    INT(OPT_HADAMARD, CMD_SYNTH, "--hadamard", "B", 0, 1 << 20, "0: none",
        "targets: store the weights folded with PrismML's Hadamard\n"
        "rotation of B-input blocks (prism.hadamard.* keys, as Bonsai 2\n"
        "files): the same model, its matrices and token table rotated"),
    INT(OPT_SEED, CMD_SYNTH, "-s, --seed", "N", -1, INT64_MAX, "42",
        "RNG seed, -1 = from the clock; each tensor has its own stream"),
    STR(OPT_NAME, CMD_SYNTH, "--name", "S", NULL, "general.name"),
    SECTION(CMD_SYNTH, "shape overrides (targets and drafters; projectors: --n-layer --n-embd --n-ff --n-head and\n"
                       "--pos-side --proj-dim)"),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--n-layer", "N", 1, 1024, NULL, ""),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--n-embd", "N", 1, 1 << 20, NULL, ""),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--n-ff", "N", 1, 1 << 20, NULL, ""),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--n-head", "N", 1, 4096, NULL, ""),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--n-head-kv", "N", 1, 4096, NULL, ""),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--head-dim", "N", 2, 4096, NULL, ""),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--n-vocab", "N", 2, 1 << 24, NULL, ""),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--n-ctx", "N", 1, 1 << 24, NULL, ""),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--rope-dim", "N", 2, 4096, NULL, "targets"),
    STRX(OPT_ROPE_SECTIONS, CMD_SYNTH, "--rope-sections", "a,b,c,d", "3,3,2,0", NULL, "targets"),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--ssm-k-heads", "N", 1, 4096, NULL, "targets"),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--ssm-v-heads", "N", 1, 4096, NULL, "targets"),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--ssm-head-dim", "N", 1, 4096, NULL, "targets"),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--conv-kernel", "N", 1, 64, NULL, "targets"),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--attn-interval", "N", 1, 1024, NULL, "targets"),
    INT(OPT_N_MERGES, CMD_SYNTH, "--n-merges", "N", 0, 1 << 20, NULL, "targets"),
    STRX(OPT_SYNTH_TAPS, CMD_SYNTH, "--taps", "a,b,...", "1,4,6", NULL, "drafters"),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--block-size", "N", 1, 64, NULL, "drafters"),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--mask-id", "N", 0, 1 << 24, NULL, "drafters"),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--markov-rank", "N", 1, 65536, NULL, "drafters"),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--pos-side", "N", 1, 1 << 16, NULL, "projectors"),
    INT(OPT_SYNTH_INT, CMD_SYNTH, "--proj-dim", "N", 1, 1 << 16, NULL, "projectors"),

    /* ---- inspect, convert, quantize ---- */
    SECTION(CMD_INSPECT | CMD_CONVERT | CMD_QUANTIZE, "options"),
    FLAG(OPT_JSON, CMD_INSPECT, "--json", "print one JSON object instead of the text report"),
    FLAG(OPT_NO_MMAP, CMD_INSPECT, "--no-mmap", "read whole files into memory (default: parse only the headers)"),
    FLAG(OPT_MMPROJ, CMD_CONVERT, "--mmproj", "hf-to-gguf: write the vision projector instead of the text model"),
    STRX(OPT_TYPE, CMD_CONVERT, "--type", "T", "bf16", "keep each tensor's dtype",
         "hf-to-gguf: type of the weight matrices (f32 f16 bf16 or any\n"
         "quantize type); norms, conv, ssm_a, ssm_dt: F32"),
    STRX(OPT_OUTPUT_TYPE, CMD_QUANTIZE, "--output-type, --output-tensor-type", "T", "q8_0", NULL, "type of output.weight"),
    STRX(OPT_EMBD_TYPE, CMD_QUANTIZE, "--embd-type, --token-embedding-type", "T", "q8_0", NULL,
         "type of token_embd.weight"),
    STRX(OPT_TENSOR_TYPE, CMD_QUANTIZE, "--tensor-type", "PAT=T", "ssm_(alpha|beta)=bf16", NULL,
         "type of the matrices whose name matches the extended\n"
         "regular expression PAT (searched; repeatable; the last\n"
         "match wins), e.g. 'ssm_(alpha|beta)=bf16'"),
    CHOICE(OPT_Q2_GROUP, CMD_QUANTIZE, "--q2-group", "128|64", "128",
           "group size meant by q2_0 (128: the legacy 34-byte block of\n"
           "Ternary-Bonsai; 64: mainline's)"),
    FLAG(OPT_PURE, CMD_QUANTIZE, "--pure",
         "accepted for llama-quantize compatibility (the default\n"
         "already uses one type for every matrix)"),
    FLAG(OPT_ALLOW_REQUANTIZE, CMD_QUANTIZE, "--allow-requantize", "allow converting tensors that are already quantized"),
    INT(OPT_THREADS, CMD_CONVERT | CMD_QUANTIZE, "-t, --threads", "N", 1, 1024, "all cores", "threads for (de)quantization"),

    /* ---- bench ---- */
    SECTION(CMD_BENCH, "bench -m MODEL (llama-bench's options) and bench --matmul"),
    STR(OPT_MODEL, CMD_BENCH, "-m, --model", "FILE", NULL, "GGUF model"),
    INT(OPT_N_PROMPT, CMD_BENCH, "-p, --n-prompt", "N", 0, 1 << 20, "512",
        "prompt-processing test pp<N> (one batch), 0 = skip"),
    INT(OPT_N_GEN, CMD_BENCH, "-n, --n-gen", "N", 0, 1 << 20, "128", "generation test tg<N> (N one-token evals), 0 = skip"),
    STRX(OPT_THREADS, CMD_BENCH, "-t, --threads", "N[,N..]", "1,2", "all cores", "threads, one row set per value"),
    INT(OPT_REPS, CMD_BENCH, "-r, --repetitions", "N", 1, 1 << 20, "5", "repetitions, mean ± sample stddev"),
    CHOICE(OPT_OUTPUT, CMD_BENCH, "-o, --output", "md|csv|json", "md", "output format"),
    STRX(OPT_VERIFY, CMD_BENCH, "--verify", "W[,W..]", "1,4", NULL, "cost of a W-token verify step relative to a 1-token step"),
    STRX(OPT_BENCH_PARALLEL, CMD_BENCH, "-npl, --parallel", "N[,N..]", "4,8", NULL,
         "tg<n>x<N>: N sessions decoding together, one token each per pass (the server's slots)"),
    FLAG(OPT_BENCH_SAMPLED, CMD_BENCH, "--sampled",
         "tg<N> sampled: each token drawn from the step before's logits (temperature 0.8, top-k 40, as run samples)"),
    FLAG(OPT_NO_MEMBW, CMD_BENCH, "--no-membw", "skip the memory-bandwidth / roofline line"),
    FLAG(OPT_NO_WARMUP, CMD_BENCH | CMD_BENCH_VISION, "--no-warmup", "skip the warm-up run"),
    FLAG(OPT_NO_MMAP, CMD_BENCH, "--no-mmap", "read the model into memory instead of mapping it"),
    STR(OPT_DEVICE, CMD_BENCH, "--device", "D", "auto", DEVICE_HELP),
    FLAG(OPT_MATMUL, CMD_BENCH, "--matmul", "bs_matmul on Bonsai-shaped 5120x17408 and 17408x5120 weights"),
    STRX(OPT_MATMUL_TYPE, CMD_BENCH, "--matmul-type", "TYPE", "q8_0", "q1_0", "weight type for --matmul"),
    INT(OPT_MATMUL_MB, CMD_BENCH, "--matmul-mb", "N", 0, 1 << 20, "1024", "MiB of distinct weight copies streamed per pass"),
    STRX(OPT_MATMUL_ROWS, CMD_BENCH, "--matmul-rows", "R,..", "1,8", "1,2,4,5,8",
         "activation rows per product (prompts: e.g. 64,512)"),
    FLAG(OPT_MATMUL_PACKED, CMD_BENCH, "--matmul-packed", "only the repacked layout's rows (the kernel column: which kernel ran)"),
    SECTION(CMD_BENCH_SPEC, "bench --spec -m TARGET -md DRAFTER: measured DSpark round costs, projected speedups and\n"
                            "a measured greedy run with and without the drafter"),
    FLAG(OPT_SPEC, CMD_BENCH_SPEC, "--spec", "this mode"),
    STR(OPT_MODEL, CMD_BENCH_SPEC, "-m, --model", "FILE", NULL, "the target"),
    STR(OPT_MODEL_DRAFT, CMD_BENCH_SPEC, "-md, --model-draft", "F", NULL, "the drafter"),
    INT(OPT_THREADS, CMD_BENCH_SPEC, "-t, --threads", "N", 1, 1024, "all cores", "threads"),
    INT(OPT_N_PROMPT, CMD_BENCH_SPEC, "-p, --n-prompt", "N", 1, 1 << 20, "64", "context tokens"),
    INT(OPT_N_GEN, CMD_BENCH_SPEC, "-n, --n-gen", "N", 0, 1 << 20, "64", "generated tokens of the measured run, 0: none"),
    INT(OPT_REPS, CMD_BENCH_SPEC, "-r, --repetitions", "N", 1, 100, "3", "repetitions (the best counts)"),
    STR(OPT_DEVICE, CMD_BENCH_SPEC, "--device", "D", "auto", "the target and the drafter on that device"),
    SECTION(CMD_BENCH_VISION, "bench --mmproj FILE: the vision encoder on random preprocessed pixels: ms per image,\n"
                              "output tokens/s, GFLOP/s of its matrix products"),
    STR(OPT_MMPROJ, CMD_BENCH_VISION, "--mmproj", "FILE", NULL, "the projector"),
    STRX(OPT_IMAGE_SIZE, CMD_BENCH_VISION, "--image-size", "WxH|N", "64x64", "the projector's image_size",
         "image size, rounded up to whole 32-pixel blocks"),
    STRX(OPT_THREADS, CMD_BENCH_VISION, "-t, --threads", "N[,N..]", "1,2", "all cores", "threads, one row per value"),
    INT(OPT_REPS, CMD_BENCH_VISION, "-r, --repetitions", "N", 1, 100, "3", "repetitions"),
    STR(OPT_DEVICE, CMD_BENCH_VISION, "--device", "D", "cpu", "vulkan[:N]: on that device"),
    SECTION(CMD_BENCH_GRAMMAR, "bench --grammar FILE | --schema FILE: constrained decoding: one token mask's time\n"
                               "(median, p90, max ms on one core) over a synthetic 248320-token vocabulary, or -m MODEL's"),
    STR(OPT_GRAMMAR, CMD_BENCH_GRAMMAR, "--grammar", "FILE", NULL, "a GBNF grammar"),
    STR(OPT_SCHEMA, CMD_BENCH_GRAMMAR, "--schema", "FILE", NULL, "a JSON schema"),
    STR(OPT_MODEL, CMD_BENCH_GRAMMAR, "-m, --model", "FILE", NULL, "the model whose vocabulary to use"),
    INT(OPT_N_GEN, CMD_BENCH_GRAMMAR, "-n, --n-gen", "N", 1, 4096, "64", "tokens per walk"),
    INT(OPT_REPS, CMD_BENCH_GRAMMAR, "-r, --repetitions", "N", 1, 100, "5", "walks"),
};

const int cli_n_opts = (int)(sizeof cli_opts / sizeof cli_opts[0]);

/* llama-server's options that ask for what this server does not do: refused with the reason
 * (cli_next), never taken silently. */
const cli_refused cli_refused_opts[] = {
    {CMD_SERVE, "--chat-template, --chat-template-file", "the model's own chat template is rendered natively"},
    {CMD_SERVE, "--ssl-key-file, --ssl-cert-file", "no TLS here; put a TLS proxy in front"},
    {CMD_SERVE, "-hf, --hf-repo, -hff, --hf-file", "no downloads; fetch the GGUF and pass -m"},
    {CMD_SERVE, "--path, --api-prefix", "no static files or prefixed routes here"},
    {CMD_SERVE, "--rerank, --reranking", "no reranking here (its endpoints answer 501)"},
    {CMD_SERVE, "--override-kv, --override-tensor, -ot", "the model's metadata and tensors are used as the file has them"},
};
const int cli_n_refused = (int)(sizeof cli_refused_opts / sizeof cli_refused_opts[0]);
