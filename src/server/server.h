/* server.h: the internals of `bitspark serve`, an OpenAI-compatible HTTP server (llama-server's
 * API) shared by its parts:
 *
 *   server_http.c     libmicrohttpd plumbing: an event loop (a few worker threads, waiting
 *                     requests suspended), deadlines, body limit and budget, Host / CORS /
 *                     content-type / API key checks, JSON replies, Server-Sent Events,
 *                     client-disconnect detection
 *   server_api.c      OpenAI request parsing -> srv_task, results -> response / chunk JSON
 *   server_sched.c    slots, the bounded queue and the scheduler thread: one generator per slot
 *                     (generate/gen.h: prompt cache, sampling, stop strings, the loop guard,
 *                     speculative rounds), their decode steps and prompt chunks evaluated
 *                     together in one pass through the weights (bs_eval_multi)
 *   server_metrics.c  counters, latency histograms and the Prometheus text of /metrics
 *   server_life.c     the lifecycle a load balancer sees: loading, ready, draining; /health,
 *                     /ready, the 503s of a replica that is not serving, graceful drain
 *   server_tools.c    a tool call's parts, the tools' string parameters
 *   server_calls.c    <tool_call> blocks read as they are generated -> tool calls
 *   server_text.c     generated text as a JSON string (bad UTF-8 as U+FFFD)
 *   server_anthropic.c, server_responses.c, server_blocks.c (server_dialect.h)
 *                     Anthropic's Messages API and OpenAI's Responses API: translated into a
 *                     chat request, answered in their own shapes
 *   server_image.c    image_url content parts (data: URLs, strict base64) -> image bytes
 *                     (server_image.h)
 *   server_vision.c   image parts encoded by the projector and placed in the prompt
 *   server_native.c   llama-server's native completion: prompt forms, its fields, its answers
 *   server_infill.c   the fill-in-the-middle prompt of POST /infill from the FIM tokens
 *   server_bias.c     logit_bias by token id or text
 *   server_slots.c    POST /slots/{id}?action=save|restore|erase, "id_slot", --no-slots
 *                     (server_slot_file.c: the scheduler's side, the files)
 *   server_lora.c     /lora-adapters and requests' "lora" (server_lora_apply.c: the scales a
 *                     pass attaches); server_props.c: /props, /models; server_media.c:
 *                     --media-path file:// images
 *
 * Doom-loop guard: `serve --loop-guard off|stop|rewind` (+ the --loop-* thresholds of run/chat)
 * is the default; a request's "loop_guard" ("off" | "stop" | "rewind", or {"mode", "min_repeats",
 * "min_chars", "max_period", "max_rewinds"}) overrides it. Each slot's generator runs the guard on
 * its decoded text; answers report the result as "loop_guard" next to "timings"
 * (server_reply.c) and /metrics counts loops, rewinds and guard stops.
 *
 * Threads: HTTP worker threads parse requests, tokenize and submit tasks, then suspend the
 * connection (a watcher thread resumes it when the task has news); one scheduler thread owns
 * the model sessions. A task is shared by both through a reference count
 * and its own mutex / condition variable. */
#ifndef BS_SERVER_H
#define BS_SERVER_H

#include "bitspark.h"
#include "generate/engine.h"
#include "generate/gen.h"
#include "text/chat_template.h"
#include "sample/loop_guard.h"
#include "sample/sampler.h"
#include "text/tokenizer.h"
#include "vision/vision.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SRV_MAX_STOP 64                  /* as many as clients send (llama-server sets no limit) */
#define SRV_MAX_STOP_LEN 65536           /* bytes of one stop string */
#define SRV_MAX_STOP_BYTES (256 * 1024)  /* of them all: their automata's tables, 5 bytes a byte */
#define SRV_MAX_TOP BS_GEN_MAX_TOP
#define SRV_MAX_CHOICES 16   /* "n" */
#define SRV_MAX_BIAS 1024
#define SRV_MAX_FIELDS 16     /* response_fields: names, and bytes of each */
#define SRV_FIELD_LEN 64
#define SRV_MAX_BIAS_VALUE 1e6    /* logit_bias values above this are a 400 (far beyond any logit) */
/* --n-predict not given: the most tokens one request may generate. Without it a request with
 * max_tokens -1 and ignore_eos (or a grammar that never ends) under --context-shift would
 * generate forever. */
#define SRV_N_PREDICT_DEFAULT 32768
/* Logprob entries (tokens x (top_logprobs + 1), all choices) one request may ask for, and all
 * requests in flight together: a reply of 16 choices x 100000 tokens x 21 would be gigabytes of
 * JSON. Past the first: 400; past the second: 503. */
#define SRV_LOGPROB_MAX (1L << 20)
#define SRV_LOGPROB_BUDGET (4L << 20)
#define SRV_MAX_ALIAS 16
#define SRV_MAX_LORA BS_ENGINE_MAX_LORA

typedef struct srv_config {
    const char *model, *drafter, *host, *api_key, *alias;
    const char *mmproj;        /* --mmproj: the vision projector (image content parts); NULL: none */
    /* set by the HTTP side before the scheduler starts; the scheduler calls it (holding no task
     * lock) when it has published tokens or ended a task, so a waiting connection resumes now
     * instead of at the watcher's next tick */
    void (*on_publish)(void);
    /* browser-facing defaults (server_http.c): no CORS header unless --cors lists the origin
     * ("*": any); on a loopback address only Host localhost / 127.0.0.1 / [::1] unless
     * --allowed-hosts adds names; POST bodies must be application/json */
    const char *cors, *allowed_hosts;
    bool special_in_messages;  /* --special-in-messages: content may hold control tokens (old) */
    const char *device;        /* bs_model_params.device (--device) */
    int port, n_slots, n_ctx, n_threads, queue_max, draft_max, draft_window;
    int n_predict;             /* --n-predict: tokens one request may generate at most, whatever
                                  it asks (0: SRV_N_PREDICT_DEFAULT) */
    long body_max;             /* bytes of a request body */
    long body_budget;          /* bytes of all request bodies being received at once (0: body_max + 1 MiB) */
    long image_budget;         /* bytes of preprocessed image pixels that requests waiting for a
                                  slot may hold, in total (0: SRV_IMAGE_BUDGET) */
    int max_connections;
    int http_threads;          /* HTTP worker threads (0: 4) */
    bool no_mmap, no_webui;
    bool embeddings, pooling_last;   /* --embeddings: POST /v1/embeddings; --pooling last (else mean) */
    bool pooling_none;         /* --pooling none: a vector per token (not on /v1/embeddings) */
    bs_loop_guard_params loop; /* the doom-loop guard of requests that do not set "loop_guard" */
    bs_engine_opts gen;        /* sampling defaults of requests (and seed_set, logit biases) and
                                  the LoRA adapters (--temp ... --lora, as for run) */
    bool normalize_set;        /* --tokenizer-normalize: override the vocabulary's normalization */
    bs_norm_mode normalize;
    const char *replica_id;    /* --replica-id: sent as X-Replica-Id on every answer (NULL: none) */
    double drain_timeout;      /* --drain-timeout: seconds in-flight work may take after SIGTERM */
    /* llama-server's slot, adapter, model-name and idle options (server_slots.c, server_lora.c,
     * server_props.c, server_media.c) */
    const char *slot_save_path;   /* --slot-save-path: POST /slots/{id}?action=save|restore|erase */
    bool no_slots;             /* --no-slots: GET /slots and the slot actions are 501 */
    bool lora_init_without_apply;   /* --lora-init-without-apply: adapters start at scale 0 */
    const char *aliases[SRV_MAX_ALIAS];   /* --alias (repeated or comma-separated); the first is
                                  the model id (alias above) */
    int n_aliases;
    const char *tags[SRV_MAX_ALIAS];      /* --tags */
    int n_tags;
    const char *media_path;    /* --media-path: file:// image URLs below this directory */
    double sleep_idle;         /* --sleep-idle-seconds: free the slots' memory when idle (0: never) */
    /* llama-server's request defaults (cli_serve_compat.c) */
    int thinking;              /* enable_thinking of chat requests that do not set it: 0 the
                                  template's, -1 off (--reasoning-budget 0), 1 on */
    int reasoning_format;      /* --reasoning-format: srv_gen's reasoning_format by default */
    int http_timeout;          /* -to: seconds an idle connection is kept (0: 600) */
    const char *samplers;      /* --samplers / --sampling-seq: the stages of requests that send none */
    bool samplers_letters;     /* ... given as letters (--sampling-seq), else names (--samplers) */
    int embd_normalize;        /* --embd-normalize N, stored as N + 1 (0: unset, L2) */
    /* set by srv_load: the adapters the scheduler attaches per pass (server_lora.c) */
    struct bs_lora *const *loras;
    int n_loras;
} srv_config;

/* SRV_FINISH_SHUTDOWN: cancelled because the server stopped (drain timeout or a second signal). */
enum srv_finish { SRV_FINISH_NONE, SRV_FINISH_STOP, SRV_FINISH_LENGTH, SRV_FINISH_ERROR, SRV_FINISH_SHUTDOWN };

/* One generated token and what logprobs report about it (raw model distribution). */
typedef bs_gen_token srv_tok;

typedef struct srv_timings {
    int n_prompt, n_cached, n_gen;
    double t_prompt_ms, t_gen_ms;
    long draft_n, draft_accepted;
} srv_timings;

/* A generation request and its result as it grows. Fields above `mu` are set before submit and
 * read-only after; fields below are guarded by mu. */
typedef struct srv_task {
    int32_t *prompt;
    int n_prompt;
    bs_sampler_params sp;
    int n_bias;
    int32_t bias_id[SRV_MAX_BIAS];
    float bias[SRV_MAX_BIAS];
    int n_predict;             /* < 0: until EOG or the context is full */
    int n_keep;                /* context shift: tokens kept at the start; < 0: serve's --keep */
    bool ignore_eos;
    int n_indent;              /* llama-server's n_indent and t_max_predict_ms (bs_gen_request) */
    int t_max_predict_ms;
    bool no_cache;             /* cache_prompt: false -- evaluate the whole prompt */
    bool no_draft;             /* draft_max: 0 -- no speculative decoding for this request */
    char *stop[SRV_MAX_STOP];
    int n_stop;
    char *breakers[BS_GEN_MAX_BREAKERS];   /* dry_sequence_breakers (malloc'd); n_breakers < 0: the server's */
    int n_breakers;
    int n_probs;               /* top logprobs per token; -1: no logprobs at all */
    bool post_probs;           /* post_sampling_probs: the sampler chain's probabilities */
    int ckpt_at;               /* prompt position worth a cache checkpoint (start of the last
                                  message), 0: none */
    bs_loop_guard_params loop; /* the doom-loop guard (--loop-guard, or the request's) */
    int n_choices;             /* "n": choices asked for (the first task carries the others) */
    struct srv_task *leader;   /* a choice after the first: the first (a reference), whose
                                  evaluated prompt it takes over; NULL otherwise */
    struct srv_task *sib[SRV_MAX_CHOICES - 1];   /* the first: the other choices (the reply's
                                  references), n_choices - 1 of them */
    char *grammar;             /* GBNF the output must match (grammar, json_schema,
                                  response_format, tool_choice), or NULL; malloc'd */
    bs_gen_image *images;      /* the prompt's images (their rows malloc'd, owned by the task
                                  without a leader; the other choices use the leader's): the
                                  rows are encoded from pixels when a slot takes the task */
    bs_image_pixels *pixels;   /* images[k]'s pixels until then (the same ownership) */
    int n_images;
    bool prompt_cut;           /* the prompt was cut to fit (/infill): the answer says truncated */
    int id_slot;               /* "id_slot": the slot that must take it (-1: any) */
    float lora[SRV_MAX_LORA];  /* the adapters' scales it runs with (the global ones, or its "lora") */
    struct srv_slot_op *op;    /* a slot action (server_slots.c) instead of a generation; owned */
    struct srv_emb *emb;       /* an embeddings request (server_embed.c) instead of a generation:
                                  the scheduler evaluates its inputs in the prompt chunks of its
                                  passes; NULL otherwise. Owned by the task */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    bool cancel;               /* the client went away: stop and free the slot */
    bool started;              /* a slot took it */
    bool done;
    int finish;                /* enum srv_finish */
    int gen_stop;              /* why the generator stopped (enum bs_gen_stop) */
    char error[256];
    char *text;                /* generated text (stop string removed at the end) */
    size_t len, cap;
    size_t n_safe;             /* bytes of text that may be streamed: no stop string can form in
                                  them and no loop-guard rewind can reach them */
    srv_tok *toks;
    int n_toks, cap_toks;
    int n_toks_safe;           /* tokens whose logprobs may be streamed (no rewind reaches them) */
    bs_loop_guard_result loop_res;   /* what the guard did (mode off: zeros) */
    srv_timings tm;
    int slot;
    long long id;              /* its id (llama-server's id_task), from srv_task_new */
    double t_submit, t_first;  /* bs_time() when queued and when its first token came (0: not yet),
                                  for the latency histograms */
    bool prompt_ready;         /* its prompt is evaluated (or it ended): the other choices may go */
    long lp_reserved;          /* logprob entries held from SRV_LOGPROB_BUDGET (given back when freed) */
    bool shifted;              /* the context was shifted (tokens dropped) while it generated */
    /* prompt progress, one entry when a slot takes it and one per prompt chunk evaluated:
     * positions in the slot then (cached + evaluated) and ms since the slot took it (streams
     * send them as prompt_progress events or Anthropic pings) */
    int *prog_done;
    float *prog_ms;
    int n_prog, cap_prog;
    double t_prompt0;
} srv_task;

srv_task *srv_task_new(void);
/* Another choice of task t (its prompt and parameters, seed + k), referencing t as its leader. */
srv_task *srv_task_choice(srv_task *t, int k);
void srv_task_unref(srv_task *t);   /* frees at zero */
void srv_task_ref(srv_task *t);

/* --- metrics (server_metrics.c) --- */
/* A Prometheus histogram with fixed bucket bounds (cumulative counts are made when printed). */
#define SRV_HIST_MAX 16
typedef struct srv_hist {
    long n[SRV_HIST_MAX + 1];  /* observations per bucket; the last: above every bound (+Inf) */
    double sum;
    long count;
} srv_hist;

typedef struct srv_metrics {
    pthread_mutex_t mu;
    long requests_total, requests_errors, requests_rejected;
    long requests_client_closed;    /* 499: the client left before its answer */
    long prompt_tokens, cached_tokens, predicted_tokens;
    double prompt_seconds, predicted_seconds;
    long n_decode, n_decode_rows;   /* batched decode passes and the rows they carried */
    long n_tokens_max;              /* the most positions a finished request's slot held */
    long n_draft_shared;            /* drafter blocks run in a pass shared with other slots */
    long draft_tokens, draft_accepted, draft_rounds;
    long loops_detected, loop_rewinds, loop_stops;   /* doom-loop guard */
    long image_jobs;                /* requests parsed on the job pool (their images decoded there) */
    int processing, deferred;       /* gauges, set by the scheduler */
    int waiting;                    /* gauge: accepted, first token not yet (queued or in prompt) */
    int in_flight;                  /* gauge: generation requests being answered (HTTP side) */
    int state;                      /* enum srv_state, for the ready / draining gauges */
    srv_hist ttft;                  /* seconds from queued to the first token */
    srv_hist tpot;                  /* seconds per output token after the first, per request */
} srv_metrics;

void srv_metrics_request(srv_metrics *m, int status);
void srv_metrics_task(srv_metrics *m, const srv_timings *t);
void srv_metrics_loop_guard(srv_metrics *m, const bs_loop_guard_result *r);
/* A finished generation's latencies (t_first 0: no token came, nothing observed). */
void srv_metrics_latency(srv_metrics *m, double t_submit, double t_first, double t_end, int n_gen);
void srv_metrics_in_flight(srv_metrics *m, int delta);
void srv_metrics_image_job(srv_metrics *m);
/* A streaming client left before its stream ended (its 200 is already counted). */
void srv_metrics_client_closed(srv_metrics *m);
int srv_metrics_get_in_flight(srv_metrics *m);
/* Prometheus text exposition; malloc'd. */
char *srv_metrics_text(srv_metrics *m, int n_slots);

/* --- scheduler (server_sched.c) --- */
typedef struct srv_sched srv_sched;

typedef struct srv_slot_info {
    int id, n_ctx, n_cached;
    bool busy;
    bool generating;           /* busy with a generation (not a slot action or embeddings) */
    bool drafts;               /* its generations speculate (a drafter, --draft-max > 0) */
    /* the task it runs, or the last it ran (llama-server's task_prev): has_task false before any */
    bool has_task;
    long long id_task;
    bs_sampler_params sp;
    int n_predict, n_keep, n_decoded;   /* n_predict and n_keep as it runs them (--n-predict, --keep) */
    bool ignore_eos, has_new_line;      /* has_new_line: a newline was generated */
} srv_slot_info;

/* mmproj: the projector that encodes requests' images when a slot takes them (NULL: none). */
srv_sched *srv_sched_new(bs_model *m, const bs_tokenizer *tok, const srv_config *cfg, srv_metrics *met,
                         const bs_mmproj *mmproj);
void srv_sched_free(srv_sched *s);
/* Queue a task (takes a reference). -1 + bs_error when the queue is full. */
int srv_sched_submit(srv_sched *s, srv_task *t);
/* Wake the scheduler (after setting a task's cancel flag). */
void srv_sched_wake(srv_sched *s);

/* Whether a submit now would be queued (not 503 for a full queue): readiness. */
bool srv_sched_accepting(srv_sched *s);
/* End every task, running or queued, with SRV_FINISH_SHUTDOWN; later submits fail. */
void srv_sched_shutdown(srv_sched *s);
int srv_sched_n_slots(const srv_sched *s);
int srv_sched_n_ctx(const srv_sched *s);
/* The server-wide cap on generated tokens per request (cfg.n_predict or its default). */
int srv_n_predict_cap(const srv_config *cfg);
/* The tokens t may generate: its max_tokens capped by --n-predict (-1 included). */
int srv_task_n_predict(const srv_config *cfg, const srv_task *t);
/* Take n logprob entries from SRV_LOGPROB_BUDGET (false: spent); srv_task_unref gives a task's
 * lp_reserved back. */
bool srv_logprob_reserve(long n);
void srv_sched_slots(srv_sched *s, srv_slot_info *out);

/* --- the whole server (server_http.c) --- */
/* What a load balancer sees (server_life.c): LOADING until the model, drafter and slots are up
 * (/health and /ready 503, everything else 503 too); READY; DRAINING after SIGTERM (health 200,
 * /ready and new generation requests 503); STOPPING once in-flight work was cancelled. */
enum srv_state { SRV_LOADING, SRV_READY, SRV_DRAINING, SRV_STOPPING };

typedef struct srv {
    srv_config cfg;
    bs_model *model;
    struct bs_lora *loras[BS_ENGINE_MAX_LORA];
    int n_loras;
    bs_tokenizer *tok;
    bs_mmproj *mmproj;         /* --mmproj, or NULL: image parts are refused */
    bs_chat_template tmpl;
    const char *tmpl_text;
    srv_sched *sched;
    srv_metrics metrics;
    struct MHD_Daemon *daemon;
    double t_start;
    long t_created;            /* wall clock at start, for /v1/models */
    int port;                  /* the bound port (cfg.port 0 picks one) */
    int max_piece;             /* bytes of the vocabulary's longest token (prompt length bound) */
    int state;                 /* enum srv_state; atomic (srv_state_get / srv_state_set) */
} srv;

/* server.c: srv_open listens (state LOADING: /health answers 503 "loading"), srv_load loads the
 * model, drafter and slots (then READY); srv_start does both. srv_stop stops everything (also
 * after srv_open or srv_load failed). */
int srv_open(srv *s, const srv_config *cfg);
int srv_load(srv *s);
int srv_start(srv *s, const srv_config *cfg);
void srv_stop(srv *s);

/* server_life.c */
typedef struct srv_reply srv_reply;
int srv_state_get(const srv *s);
void srv_state_set(srv *s, int state);
/* The lifecycle's say on a request before its body is read: GET /health, /v1/health, /ready and
 * /health?ready (ready_arg) are answered here in every state; while LOADING every other request
 * is 503, while DRAINING every new generation request; /ready is 503 "busy" while the queue is
 * full or request bodies wait for body memory (bodies_wait). true: *r holds the answer. */
bool srv_life_gate(srv *s, const char *method, const char *url, bool ready_arg, bool bodies_wait, srv_reply *r);
/* Graceful drain: DRAINING, then wait until no generation request is in flight, at most
 * timeout_s seconds; interrupted (called every ~50 ms, may block that long; NULL: never) says a
 * second signal came. On timeout or interruption the rest is cancelled (streams end with
 * finish_reason "shutdown", waiting answers are 503) and given a moment to be sent. Returns the
 * number of generation requests that had to be cancelled. */
int srv_drain(srv *s, double timeout_s, bool (*interrupted)(void *), void *ud);
/* server_http.c */
int srv_http_start(srv *s);
void srv_http_stop(srv *s);
/* The header checks of server_http.c on plain header values (NULL: absent), for the fuzzer:
 * Host allowed? Access-Control-Allow-Origin for this Origin (NULL: none)? A JSON body type?
 * API key given (for url)? */
bool srv_host_allowed(const srv *s, const char *host);
const char *srv_cors_origin(const srv *s, const char *origin);
bool srv_json_content_type(const char *content_type);
/* Whether a POST with these headers (each may be NULL) may be read: see server_http.c. */
bool srv_post_type_ok(const srv *s, const char *content_type, const char *origin);
bool srv_authorized(const srv *s, const char *url, const char *authorization, const char *x_api_key);
/* Request framing from the Host, Content-Length and Transfer-Encoding headers (name[i]: value[i],
 * in order; other headers may be there too): 0; 400 for two Hosts, two different Content-Lengths,
 * a Content-Length that is not a number or one beside Transfer-Encoding; 501 for a
 * Transfer-Encoding other than one "chunked". msg says why. */
int srv_framing_check(const char *const *name, const char *const *value, size_t n, char *msg, size_t len);

/* server_jobs.c: a small pool that runs srv_handle for requests with image parts (decoding
 * and preprocessing stay off the HTTP threads). srv_job_submit takes body (malloc'd) and a copy
 * of r (async, client_gone); NULL when the pool's queue is full (or stopped). on_done is called
 * after each job. A done job's answer is taken once (srv_job_take frees the job); a job whose
 * client left is abandoned (freed, with its answer, when it ends). */
typedef struct srv_job srv_job;
int srv_jobs_start(int n_threads, void (*on_done)(void));
void srv_jobs_stop(void);
srv_job *srv_job_submit(srv *s, const char *method, const char *url, char *body, size_t len, const srv_reply *r);
bool srv_job_done(srv_job *j);
void srv_job_take(srv_job *j, srv_reply *out);
void srv_job_abandon(srv_job *j);

/* --- growable text buffer --- */
typedef struct srv_buf { char *p; size_t len, cap; } srv_buf;
void srv_buf_add(srv_buf *b, const char *s, size_t n);
void srv_buf_adds(srv_buf *b, const char *s);
void srv_buf_free(srv_buf *b);

/* --- tool calls (server_tools.c, server_calls.c) --- */
typedef struct srv_tool_call {
    char *name;
    char *arguments;           /* JSON object text */
} srv_tool_call;

/* A chat's content as it comes -> text and tool calls, each call as it is written (see
 * server_calls.c for the forms read). index counts the calls from 0; a call's args pieces joined
 * are its arguments (a JSON object's text). */
typedef struct srv_calls_ops {
    void (*text)(void *ud, const char *p, size_t n);
    void (*open)(void *ud, int index, const char *name);
    void (*args)(void *ud, int index, const char *p, size_t n);
    void (*close)(void *ud, int index);
} srv_calls_ops;

typedef struct srv_calls {
    srv_buf buf;               /* text read and not decided yet, from at */
    size_t at, scan, held, key_len;
    int mode, n_calls, n_params;
    bool lead;
    bool cut;                  /* the text ended inside a call (closed then) or its opening */
    const char *str_params;    /* srv_tool_string_params (not owned), or NULL */
    bool one_call;             /* the first call's events only (parallel calls off); n_calls counts all */
    char *name;                /* the open call's name */
    srv_buf keys;              /* the open call's keys, "\nKEY\n" each */
} srv_calls;

void srv_calls_init(srv_calls *c, const char *str_params, bool one_call);
/* final: the end (held text is decided, an open call closes). */
void srv_calls_feed(srv_calls *c, const char *p, size_t n, bool final, const srv_calls_ops *ops, void *ud);
void srv_calls_free(srv_calls *c);
/* Whether an answer with n_calls calls ends for them (finish_reason tool_calls, stop_reason
 * tool_use): some call, and the text not cut inside one by the token limit (length). */
bool srv_calls_finish(const srv_task *t, int n_calls, bool cut);

/* The calls in a finished answer's content: *calls (malloc'd, the count returned), *rest the
 * text (srv_buf_free it), *cut (may be NULL) whether the last call was cut by the end. */
int srv_parse_tool_calls(const char *content, size_t len, const char *str_params, bool one_call, srv_tool_call **calls,
                         srv_buf *rest, bool *cut);
void srv_free_tool_calls(srv_tool_call *calls, int n);
/* server_calls.c's parts: a parameter's value as JSON text; the JSON form of a call in [a, b)
 * (0, or -1: not one); the string parameters of a request's tools (NULL: none). */
char *srv_tool_param_json(const char *a, const char *b);
int srv_tool_json_call(const char *a, const char *b, srv_tool_call *out);
struct json_t;
char *srv_tool_string_params(struct json_t *tools);

/* --- request handling (server_api.c, which uses server_reply.c), called by server_http.c --- */
typedef struct srv_stream srv_stream;
typedef struct srv_pending srv_pending;

typedef struct srv_reply {
    int status;
    const char *ctype;
    char *body;                /* malloc'd; NULL with stream */
    size_t len;
    srv_stream *stream;        /* SSE reply: server_http.c pulls it with srv_stream_read */
    const char *allow;         /* 405: the methods the endpoint has (the Allow header) */
    const char *csp;           /* the web page: its Content-Security-Policy (no framing, no referrer) */
    /* set by server_http.c: never block; a non-streaming generation comes back as pending */
    bool async;
    srv_pending *pending;
    /* set by server_http.c: true once the client has gone away */
    bool (*client_gone)(void *ud);
    void *ud;
    /* set by server_http.c on its own threads: an image is not decoded there. The handler stops
     * at the first one with wants_job set (and nothing else to send), and the request goes
     * whole to the job pool (server_jobs.c), however its JSON spells the image. */
    bool no_images;
    bool wants_job;
} srv_reply;

struct json_t;
/* A rendered chat prompt to ids: the template's structure with special tokens, the request's
 * own text (spans from bs_chat_render_spans) as plain text, so a "<|im_start|>system" typed
 * into a message stays bytes (cfg.special_in_messages: the old way, all parsed as specials).
 * When no span holds a control token the whole prompt is tokenized at once, as before. */
int srv_tokenize_prompt(srv *s, const char *text, size_t len, const bs_chat_span *sp, size_t n_sp,
                        int32_t **ids, size_t *n);
/* Whether url (path, maybe with a query) is an endpoint that generates or embeds: what a
 * draining server refuses and counts as in flight. */
bool srv_route_generates(const char *url);
/* Route one request (body: the raw bytes, may be empty) into *r. */
void srv_handle(srv *s, const char *method, const char *url, const char *body, size_t len, srv_reply *r);
/* Error reply in OpenAI's shape: {"error":{"code","message","type"}}. */
void srv_reply_error(srv_reply *r, int status, const char *type, const char *fmt, ...);
void srv_reply_json(srv_reply *r, int status, struct json_t *j);   /* steals j */
/* After a reply of this many bytes was built: give the memory its building used back to the
 * system (glibc keeps freed small blocks in its arenas: RSS would stay at the peak). */
#define SRV_TRIM_BYTES (1u << 20)
void srv_trim_after(size_t bytes);
/* The model's id in answers and /v1/models: --alias, else the file name. */
const char *srv_model_name(const srv *s);
struct json_t *srv_error_json(int status, const char *type, const char *msg);   /* {"error": {...}} */

/* Next bytes of an SSE stream into out (appended). Blocks until there is something, the stream
 * ends or the client is gone. 1: data added, 0: the stream is over, -1: the client is gone
 * (the task is cancelled). */
int srv_stream_read(srv_stream *st, srv_buf *out);
void srv_stream_free(srv_stream *st);   /* cancels a task still running */
/* Without blocking: whether srv_stream_read has something (or the end) to give now; and
 * srv_stream_read if so, else 2. */
bool srv_stream_ready(srv_stream *st);
bool srv_stream_done(const srv_stream *st);   /* its last event is read (srv_stream_read said so) */
int srv_stream_poll(srv_stream *st, srv_buf *out);
/* A pending answer (r->async): ready once the task is done; finish fills r (and frees p);
 * free cancels a task still running. */
bool srv_pending_ready(srv_pending *p);
void srv_pending_finish(srv_pending *p, srv_reply *r);
void srv_pending_free(srv_pending *p);

/* What a generation endpoint asked for, beyond the task: how to shape the answer. */
typedef struct srv_gen {
    bool chat;                 /* /v1/chat/completions (else /v1/completions) */
    bool stream, include_usage;
    bool logprobs;             /* report logprobs (top_logprobs: task->n_probs) */
    bool echo;                 /* completions: prepend the prompt */
    bool tools;                /* tools were offered: parse <tool_call> blocks */
    bool one_call;             /* parallel_tool_calls false: the first call only */
    bool in_think;             /* the prompt opened a think block: output starts in reasoning */
    /* reasoning_format: 0 split the think block into reasoning_content (auto, deepseek), 1 none:
     * everything in content, 2 deepseek-legacy: content as generated and reasoning_content too */
    int reasoning_format;
    bool native;               /* llama-server's POST /completion: its own answer shape */
    const struct srv_shape *shape;   /* another API's answer shape (server_dialect.h), or NULL */
    /* native only (server_native.c): n_probs, post_sampling_probs, return_tokens,
     * return_progress, response_fields */
    int n_probs;
    bool post_probs, return_tokens, progress;
    bool timings_per_token;    /* every streamed chunk carries the timings so far (native and OpenAI) */
    int n_fields;
    char fields[SRV_MAX_FIELDS][SRV_FIELD_LEN];
    bool fields_set;           /* response_fields was given: only those (none: an empty answer) */
    /* the answer of a finished task that is not a generation (embeddings), or NULL */
    void (*answer)(srv *s, srv_task *t, srv_reply *r);
    char *prompt_text;         /* for echo; malloc'd */
    char *str_params;          /* the tools' string parameters (srv_tool_string_params); malloc'd */
    char id[48];
    long created;
} srv_gen;
void srv_gen_free(srv_gen *g);   /* what g owns */

/* server_native.c: llama-server's native completion fields and answers. A request's error
 * (status, type, message; n_prompt for exceed_context_size_error) for the caller to answer. */
typedef struct srv_fail {
    int status;
    const char *type;
    char msg[384];
    long n_prompt;
} srv_fail;
int srv_fail_set(srv_fail *f, int status, const char *type, const char *fmt, ...);   /* returns status */
/* A lower bound of the tokens of `bytes` bytes of text (0 when unknown): see server_api.c. */
size_t srv_min_tokens(const srv *s, size_t bytes);
struct json_t *srv_text_json(const char *p, size_t len);   /* not UTF-8: U+FFFD for bad bytes */
struct json_t *srv_token_bytes_json(const srv *s, int32_t id);   /* a token's bytes, as integers */
/* The stop string that ended t (t->gen_stop BS_GEN_STOP_STRING), or NULL (server_blocks.c). */
const char *srv_stop_matched(const srv *s, const srv_task *t);
struct json_t *srv_timings_json(const srv_timings *tm);
/* n_probs, post_sampling_probs, return_tokens, return_progress, response_fields into g (and
 * t->n_probs); 0 or the failing status (f). */
int srv_native_opts(struct json_t *b, srv_gen *g, srv_task *t, srv_fail *f);
/* llama-server's sampler fields beyond the common ones (server_samplers.c): top-n-sigma,
 * typical-p, XTC, dynamic temperature, Mirostat into p, `samplers` turns stages off, a negative
 * temperature is greedy. 0, or the failing status (f). */
int srv_sampler_fields(struct json_t *b, const char *def_samplers, bool def_letters, bs_sampler_params *p, srv_fail *f);
/* A request body's typed fields (server_fields.c): *out left alone when the field is absent or
 * null; false with a 400 naming the field in r when its type or range is wrong. srv_get_int takes
 * a number with a zero fraction too (3.0). */
bool srv_get_num(struct json_t *b, const char *k, double lo, double hi, double *out, srv_reply *r);
bool srv_get_float(struct json_t *b, const char *k, double lo, double hi, float *out, srv_reply *r);
bool srv_get_int(struct json_t *b, const char *k, long lo, long hi, long *out, srv_reply *r);
bool srv_get_bool(struct json_t *b, const char *k, bool *out, srv_reply *r);
/* POST /tokenize and /detokenize (server_tokenize.c). */
void srv_api_tokenize(srv *s, struct json_t *b, srv_reply *r);
void srv_api_detokenize(srv *s, struct json_t *b, srv_reply *r);
/* The chain's parameters but the seed (temperature, top-k/p, min-p, penalties, DRY and those
 * stages) into a settings object (generation_settings, /props' params, /slots' params). */
void srv_sampler_settings(struct json_t *j, const bs_sampler_params *p);
/* llama-server's sampler names of a chain's order (bs_sampler_params.order as the server sets it:
 * "" none; NULL the whole default chain, as llama-server lists its configured one: a client
 * sending the list back keeps every stage and their order). */
struct json_t *srv_sampler_chain_json(const char *order);
/* The order --samplers / --sampling-seq give (def NULL: "", the default chain). */
void srv_sampler_default_order(const char *def, bool letters, char order[16]);
typedef struct srv_prompt {
    int32_t *ids;
    int n, cap;
    char *text;                /* the prompt's text (malloc'd; NULL if it is not text) */
} srv_prompt;
/* b's "prompt" in llama-server's forms: *n prompts (at most max; a list of one is one), each
 * tokenized and checked against the context. 0 or the failing status (f). */
int srv_native_prompts(srv *s, struct json_t *b, int max, srv_prompt **out, int *n, srv_fail *f);
void srv_prompts_free(srv_prompt *p, int n);
/* Several prompts (the list form), each with t->n_choices completions (n, n_cmpl): the tasks
 * beside t as its other "choices", answer q = prompt q / n's completion q % n; each prompt's first
 * takes its own prompt from pr with t's seed, the others its evaluated prompt with seed + j.
 * Answered together, never streamed. 0 or the status. */
int srv_native_more(srv_task *t, srv_prompt *pr, int np, const srv_gen *g, srv_fail *f);
/* The answer of a finished native task (several prompts: an array, one per task of t). */
struct json_t *srv_native_answer(const srv *s, const char *model, srv_task *t, const srv_gen *g);
/* A stream event: text[0, len) is new, end the bytes of the task's text sent with it; the
 * tokens whose text is sent go with it (*toks_sent: how many were; at the end all the rest).
 * final: the last event, which as llama-server's carries no text or tokens of its own (send
 * the rest in an event before it) but the whole answer's fields. */
struct json_t *srv_native_chunk(const srv *s, const char *model, srv_task *t, const srv_gen *g, const char *text,
                                size_t len, size_t end, bool final, int *toks_sent);
/* The prompt_progress event of t's progress entry k (llama-server's total, cache, processed,
 * time_ms). */
/* Progress entry k of t as {total, cache, processed, time_ms} (every stream shape's prompt_progress). */
struct json_t *srv_prompt_progress(const srv_task *t, int k);
struct json_t *srv_native_progress(const srv_task *t, int k);
/* The prompt's positions (an image takes one per row of its grid). */
long srv_task_positions(const srv_task *t);
bool srv_task_truncated(const srv_task *t);   /* cut prompt, shifted or full context */

/* server_infill.c: the FIM prompt of POST /infill into *out (*cut: a part was cut to fit);
 * 0 or the failing status (501: the model has no FIM tokens). */
int srv_infill_prompt(srv *s, struct json_t *b, int n_predict, srv_prompt *out, bool *cut, srv_fail *f);

/* server_bias.c: b's "logit_bias" (ids or text, object or list) into t; 0 or the failing status. */
int srv_parse_bias(const bs_tokenizer *tok, struct json_t *b, srv_task *t, int n_vocab, srv_fail *f);

/* server_embed.c: POST /v1/embeddings. The inputs become a task (srv_task.emb) that the
 * scheduler evaluates chunk by chunk beside the generations, on its own session: cancellable,
 * queued and drained like a generation. */
void srv_api_embeddings(srv *s, struct json_t *b, srv_reply *r, bool oai);   /* oai: /v1/embeddings */
#define SRV_EMB_ROWS_MAX (16L << 20)   /* --pooling none: values (tokens x n_embd) one answer may hold */
typedef struct srv_emb {
    int count, E;
    int32_t **ids;             /* count inputs of n[i] token ids */
    int *n;
    float *out;                /* count x E: sums while an input runs, then its vector; --pooling
                                  none: total x E, a row per token (input i's from off[i]) */
    bool last;                 /* --pooling last */
    bool none;                 /* --pooling none */
    int norm;                  /* embd_normalize: -1 none (the mean), 0 max-abs to int16's range, 1
                                  taxicab, 2 L2 (the default), p > 2 the p-norm (llama.cpp's) */
    bool native;               /* /embeddings, /embedding: llama-server's answer shape, not OpenAI's */
    bool base64;               /* encoding_format "base64" */
    long *off;
    int cur, pos;              /* scheduler: the input being evaluated, its tokens done */
    long total;                /* tokens of all inputs */
} srv_emb;
/* server_emb.c */
void srv_emb_free(srv_emb *e);
/* The scheduler's side: the next chunk of at most max tokens (*tok; *fresh: the first of an
 * input, the session starts empty), 0 once every input is done; then its n rows of last-layer
 * hidden states (the session's taps), pooled into the input's vector. */
int srv_emb_plan(srv_emb *e, int max, const int32_t **tok, bool *fresh);
void srv_emb_rows(const bs_model *m, srv_emb *e, float *rows, int n);

/* server_reply.c: a finished task -> response JSON (r->body), or an SSE stream over it. Both
 * take ownership of g->prompt_text and a reference to t. */
void srv_reply_generation(srv *s, srv_task *t, srv_gen *g, srv_reply *r);

/* --- slots, adapters, model names, media (server_slots.c, server_lora.c, server_props.c,
 * server_media.c) --- */
typedef struct srv_slot_op srv_slot_op;
/* POST /slots/{id}?action=... (and GET /slots under --no-slots): true when url is theirs and *r
 * holds the answer (or the pending action). */
bool srv_slots_route(srv *s, const char *method, const char *url, const char *body, size_t len, srv_reply *r);
/* The scheduler's side of an action on an idle slot's generator; lora: the slot's adapter scales
 * (a restore sets them to the file's, an erase to 0). The answer is kept in op. */
int srv_slot_op_run(srv_slot_op *op, const srv_config *cfg, bs_gen *g, float *lora);
void srv_slot_op_free(srv_slot_op *op);
/* A generation request's "id_slot" and "lora" into t (false + a 400 in r). */
bool srv_slots_parse(srv *s, struct json_t *b, srv_task *t, srv_reply *r);
/* --lora adapters: loaded and checked (not attached; cfg.loras set), and freed. */
int srv_lora_load(srv *s);
void srv_lora_unload(srv *s);
bool srv_lora_parse(srv *s, struct json_t *b, srv_task *t, srv_reply *r);
/* The global scales, SRV_MAX_LORA of them: those of requests without "lora" and of embeddings
 * (server_lora_apply.c); set all at once. */
void srv_lora_global(float *out);
void srv_lora_set_global(const float *scale);
bool srv_lora_route(srv *s, const char *method, const char *url, const char *body, size_t len, srv_reply *r);
/* The model with exactly these scales attached (0: not attached). -1 + error. */
int srv_lora_apply(bs_model *m, struct bs_lora *const *loras, int n, const float *scale);
/* GET /models, /v1/models and /props (server_props.c). */
void srv_api_models(srv *s, srv_reply *r);
void srv_api_show(srv *s, srv_reply *r);   /* POST /api/show (Ollama's) */
void srv_api_props(srv *s, srv_reply *r);
/* --media-path: a file:// URL's bytes, the path confined to the directory; -1 + message. */
void srv_media_set_path(const char *dir);
int srv_media_read(const char *url, size_t n, size_t max_bytes, unsigned char **out, size_t *len, char *err,
                   size_t errlen);
/* --sleep-idle-seconds: whether the slots' memory is freed now (server_sched.c). */
bool srv_sched_sleeping(srv_sched *s);

#endif
