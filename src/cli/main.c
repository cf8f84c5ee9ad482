/* main.c: the bitspark executable: dispatches `bitspark <command> [options]`. */
#include "bitspark.h"
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "io/util.h"

#include <stdio.h>
#include <string.h>

static const bs_command commands[] = {
    {"inspect", "show a GGUF or safetensors file: metadata, tensors, what model it is", cmd_inspect, help_inspect},
    {"synth", "write a synthetic qwen35 target or dspark drafter (random QAT-like weights)", cmd_synth, help_synth},
    {"run", "generate text from a prompt", cmd_run, help_run},
    {"chat", "interactive multi-turn chat in the terminal", cmd_chat, help_chat},
    {"logits", "evaluate tokens and write the raw logits (for comparing runtimes)", cmd_logits, help_logits},
    {"tokenize", "print the token ids of a text", cmd_tokenize, help_tokenize},
    {"detokenize", "print the text of token ids", cmd_detokenize, help_detokenize},
    {"bench", "llama-bench compatible speed measurement", cmd_bench, help_bench},
    {"devices", "list the CPU and Vulkan devices (--device) with the features used", cmd_devices, help_devices},
    {"quantize", "convert a GGUF's tensors to another weight format", cmd_quantize, help_quantize},
    {"convert", "convert drafters and HF checkpoints between GGUF and safetensors", cmd_convert, help_convert},
    {"serve", "OpenAI-compatible HTTP server", cmd_serve, help_serve},
    {"antidoom", "doom-loop pair mining and chosen-win evaluation", cmd_antidoom, help_antidoom},
    {"lora", "merge LoRA adapters into a GGUF (re-quantized, with a report of what survived)", cmd_lora, help_lora},
    {"mmproj-embed", "the image embeddings of a vision projector (mmproj) for one image", cmd_mmproj_embed, help_mmproj_embed},
    {"draft-logits", "one DSpark drafter round on given tap rows (base block logits, drafts)", cmd_draft_logits, help_draft_logits},
};

static const bs_command *find_command(const char *name) {
    for (size_t i = 0; i < BS_ARRAY_LEN(commands); i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static void usage(FILE *out) {
    fprintf(out, "bitspark %s: inference engine for 1-bit and ternary Bonsai models\n\n", BITSPARK_VERSION);
    fprintf(out, "usage: bitspark <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < BS_ARRAY_LEN(commands); i++)
        fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n'bitspark help <command>' shows a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    const char *name = argv[1];
    if (!strcmp(name, "-h") || !strcmp(name, "--help")) { usage(stdout); return 0; }
    if (!strcmp(name, "--version") || !strcmp(name, "version")) {
        printf("bitspark %s\n", BITSPARK_VERSION);
        return 0;
    }
    if (!strcmp(name, "help")) {
        if (argc < 3) { usage(stdout); return 0; }
        if (!strcmp(argv[2], "--options")) { cli_opts_dump(); return 0; }
        const bs_command *c = find_command(argv[2]);
        if (!c) { fprintf(stderr, "bitspark: unknown command '%s'\n", argv[2]); return 2; }
        c->help();
        return 0;
    }
    const bs_command *c = find_command(name);
    if (!c) {
        fprintf(stderr, "bitspark: unknown command '%s' (see 'bitspark --help')\n", name);
        return 2;
    }
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { c->help(); return 0; }
    return c->run(argc - 1, argv + 1);
}
