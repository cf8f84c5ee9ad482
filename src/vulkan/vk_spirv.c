/* vk_spirv.c: mm_q_coop.comp's module for VK_KHR_cooperative_matrix devices (AMD, Intel; NVIDIA
 * has both). Debian's glslang writes only the NV form of int8 cooperative matrices, so this
 * rewrites that module, instruction by instruction, into the KHR form, which differs in encoding
 * only:
 *   capability CooperativeMatrixNV -> CooperativeMatrixKHR, extension name likewise;
 *   OpTypeCooperativeMatrixNV (type, scope, rows, cols) -> KHR's, plus a Use operand (A, B or
 *     accumulator: read off the multiply-adds' operands);
 *   OpCooperativeMatrixLoadNV / StoreNV (..., stride, column-major bool) -> KHR's (..., layout,
 *     stride): the bool constant becomes a layout constant;
 *   OpCooperativeMatrixMulAddNV -> KHR's, with the operands' signedness spelled out (KHR takes it
 *     from a mask, NV from the component types);
 *   OpCooperativeMatrixLengthNV -> KHR's.
 * The uint constants the new operands name are added before the first cooperative matrix type.
 * Anything it does not expect (a spec-constant layout, an operand of unknown type) is refused:
 * the KHR way is then unavailable, never wrong. A context still checks the kernel's bits against
 * mv_q before it trusts it (vk_mm.c). */
#include "vulkan/vk_internal.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

enum {
    OP_EXTENSION = 10, OP_TYPE_INT = 21, OP_CONSTANT_TRUE = 41, OP_CONSTANT_FALSE = 42, OP_CONSTANT = 43,
    OP_CAPABILITY = 17, OP_FUNCTION = 54,
    OP_TYPE_COOP_NV = 5358, OP_LOAD_NV = 5359, OP_STORE_NV = 5360, OP_MULADD_NV = 5361, OP_LENGTH_NV = 5362,
    OP_TYPE_COOP_KHR = 4456, OP_LOAD_KHR = 4457, OP_STORE_KHR = 4458, OP_MULADD_KHR = 4459, OP_LENGTH_KHR = 4460,
    CAP_COOP_NV = 5357, CAP_COOP_KHR = 6022,
    USE_A = 0, USE_B = 1, USE_ACC = 2, LAYOUT_ROW = 0, LAYOUT_COL = 1,
    SIGNED_A = 1, SIGNED_B = 2, SIGNED_C = 4, SIGNED_R = 8,
    MAX_COOP_TYPES = 8
};

typedef struct {
    const uint32_t *in;
    size_t n, bound;
    uint32_t *type_of;     /* a value id's type id, where it is a cooperative matrix (0 else) */
    uint8_t *kind;         /* per id: 1 OpConstantTrue, 2 OpConstantFalse, 3 coop type, 4 signed int type */
    int use[MAX_COOP_TYPES];
    uint32_t coop[MAX_COOP_TYPES], comp[MAX_COOP_TYPES];
    int n_coop;
    uint32_t uint_type, c_val[3];  /* the added constants' ids: uint 0, 1, 2 (the uses; layouts 0 and 1) */
    uint32_t *out;
    size_t n_out, cap;
} rw;

static void put(rw *r, uint32_t w) {
    if (r->n_out == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 1024;
        r->out = bs_xrealloc(r->out, r->cap * sizeof *r->out);
    }
    r->out[r->n_out++] = w;
}

static void put_inst(rw *r, uint32_t op, const uint32_t *ops, size_t n) {
    put(r, (uint32_t)(n + 1) << 16 | op);
    for (size_t i = 0; i < n; i++) put(r, ops[i]);
}

static int coop_index(const rw *r, uint32_t id) {
    for (int i = 0; i < r->n_coop; i++)
        if (r->coop[i] == id) return i;
    return -1;
}

/* What the first pass notes of the instruction at word i. */
static int scan_one(rw *r, size_t i, bool in_func) {
    const uint32_t *w = r->in + i;
    const uint32_t op = w[0] & 0xffff, len = w[0] >> 16;
    const bool id1 = len >= 2 && w[1] < r->bound, id2 = len >= 3 && w[2] < r->bound;
    if (op == OP_TYPE_INT && len == 4 && id1) {
        if (w[2] == 32 && w[3] == 0 && !r->uint_type && !r->n_coop) r->uint_type = w[1];   /* (declared before them) */
        if (w[3] == 1) r->kind[w[1]] = 4;
    }
    if ((op == OP_CONSTANT_TRUE || op == OP_CONSTANT_FALSE) && len == 3 && id2) r->kind[w[2]] = op == OP_CONSTANT_TRUE ? 1 : 2;
    if (op == OP_TYPE_COOP_NV) {
        if (len != 6 || !id1 || r->n_coop == MAX_COOP_TYPES) return -1;
        r->kind[w[1]] = 3;
        r->coop[r->n_coop] = w[1];
        r->comp[r->n_coop] = w[2];
        r->use[r->n_coop++] = -1;
    }
    /* inside functions, an instruction whose first operand is a cooperative matrix type is a
       value of that type (result type, result id) */
    if (in_func && id1 && id2 && r->kind[w[1]] == 3) r->type_of[w[2]] = w[1];
    if (op == OP_MULADD_NV) {   /* the types' roles: a, b and c / the result */
        if (len != 6 || w[3] >= r->bound || w[4] >= r->bound || w[5] >= r->bound || r->type_of[w[5]] != w[1]) return -1;
        const uint32_t t[3] = {r->type_of[w[3]], r->type_of[w[4]], w[1]};
        for (int k = 0; k < 3; k++) {
            const int j = coop_index(r, t[k]);
            if (j < 0 || (r->use[j] >= 0 && r->use[j] != k)) return -1;
            r->use[j] = k;   /* USE_A, USE_B, USE_ACC in operand order */
        }
    }
    return 0;
}

static int scan(rw *r) {
    bool in_func = false;
    for (size_t i = 5; i < r->n;) {
        const uint32_t len = r->in[i] >> 16;
        if (len == 0 || len > r->n - i) return -1;
        if ((r->in[i] & 0xffff) == OP_FUNCTION) in_func = true;
        if (scan_one(r, i, in_func)) return -1;
        i += len;
    }
    if (!r->uint_type || !r->n_coop) return -1;
    for (int j = 0; j < r->n_coop; j++)
        if (r->use[j] < 0) return -1;
    return 0;
}

static uint32_t layout_of(const rw *r, uint32_t bool_id) {
    if (bool_id >= r->bound || (r->kind[bool_id] != 1 && r->kind[bool_id] != 2)) return 0;   /* not a constant bool */
    return r->c_val[r->kind[bool_id] == 1 ? LAYOUT_COL : LAYOUT_ROW];
}

static bool signed_type(const rw *r, uint32_t coop_type) {
    const int j = coop_index(r, coop_type);
    return j >= 0 && r->comp[j] < r->bound && r->kind[r->comp[j]] == 4;
}

/* One instruction of the second pass, rewritten where it is NV's. */
static int emit(rw *r, const uint32_t *w, bool *consts_done) {
    const uint32_t op = w[0] & 0xffff, len = w[0] >> 16;
    const uint32_t *o = w + 1;
    switch (op) {
    case OP_CAPABILITY:
        put_inst(r, OP_CAPABILITY, (const uint32_t[]){o[0] == CAP_COOP_NV ? CAP_COOP_KHR : o[0]}, 1);
        return 0;
    case OP_EXTENSION:
        if (len >= 2 && strncmp((const char *)o, "SPV_NV_cooperative_matrix", 4 * (len - 1)) == 0) {
            uint32_t s[7] = {0};   /* "SPV_KHR_cooperative_matrix" and its NUL in 7 words */
            memcpy(s, "SPV_KHR_cooperative_matrix", 26);
            put_inst(r, OP_EXTENSION, s, 7);
            return 0;
        }
        break;
    case OP_TYPE_COOP_NV: {
        if (!*consts_done) {   /* the constants the rewritten operands name, before their first use */
            for (uint32_t v = 0; v < 3; v++) put_inst(r, OP_CONSTANT, (const uint32_t[]){r->uint_type, r->c_val[v], v}, 3);
            *consts_done = true;
        }
        const int j = coop_index(r, o[0]);
        put_inst(r, OP_TYPE_COOP_KHR, (const uint32_t[]){o[0], o[1], o[2], o[3], o[4], r->c_val[r->use[j]]}, 6);
        return 0;
    }
    case OP_LOAD_NV: {   /* type, result, pointer, stride, column-major, [memory operands] */
        if (len < 6) return -1;
        const uint32_t lay = layout_of(r, o[4]);
        if (!lay) return -1;
        uint32_t ops[16] = {o[0], o[1], o[2], lay, o[3]};
        if (len - 6 > 11) return -1;
        memcpy(ops + 5, o + 5, 4u * (len - 6));
        put_inst(r, OP_LOAD_KHR, ops, len - 1);
        return 0;
    }
    case OP_STORE_NV: {   /* pointer, object, stride, column-major, [memory operands] */
        if (len < 5) return -1;
        const uint32_t lay = layout_of(r, o[3]);
        if (!lay) return -1;
        uint32_t ops[16] = {o[0], o[1], lay, o[2]};
        if (len - 5 > 12) return -1;
        memcpy(ops + 4, o + 4, 4u * (len - 5));
        put_inst(r, OP_STORE_KHR, ops, len - 1);
        return 0;
    }
    case OP_MULADD_NV: {   /* type, result, a, b, c */
        const uint32_t ta = r->type_of[o[2]], tb = r->type_of[o[3]], tc = r->type_of[o[4]];
        const uint32_t mask = (signed_type(r, ta) ? SIGNED_A : 0) | (signed_type(r, tb) ? SIGNED_B : 0) |
                              (signed_type(r, tc) ? SIGNED_C : 0) | (signed_type(r, o[0]) ? SIGNED_R : 0);
        put_inst(r, OP_MULADD_KHR, (const uint32_t[]){o[0], o[1], o[2], o[3], o[4], mask}, 6);
        return 0;
    }
    case OP_LENGTH_NV:
        if (len != 4) return -1;
        put_inst(r, OP_LENGTH_KHR, o, 3);
        return 0;
    }
    put_inst(r, op, o, len - 1);
    return 0;
}

int bs_vk_spirv_coop_khr(const uint32_t *in, size_t n_words, uint32_t **out, size_t *out_words) {
    *out = NULL;
    *out_words = 0;
    if (n_words < 5 || in[0] != 0x07230203u || in[3] == 0 || in[3] > (1u << 22) || in[3] > n_words * 4)
        return bs_error("SPIR-V: not a module");
    rw r = {.in = in, .n = n_words, .bound = in[3]};
    r.type_of = bs_xcalloc(r.bound + 6, sizeof *r.type_of);
    r.kind = bs_xcalloc(r.bound + 6, 1);
    int rc = scan(&r) ? -1 : 0;
    uint32_t next = (uint32_t)r.bound;
    for (int v = 0; v < 3; v++) r.c_val[v] = next++;
    bool consts_done = false;
    if (!rc) {
        for (int k = 0; k < 5; k++) put(&r, in[k]);
        r.out[3] = next;
        for (size_t i = 5; i < n_words && !rc; i += in[i] >> 16) rc = emit(&r, in + i, &consts_done);
    }
    free(r.type_of);
    free(r.kind);
    if (rc || !consts_done) {
        free(r.out);
        return bs_error("SPIR-V: the cooperative-matrix module is not one the KHR rewrite knows");
    }
    *out = r.out;
    *out_words = r.n_out;
    return 0;
}
