/* test_vulkan_spirv.c: mm_q_coop's module rewritten for VK_KHR_cooperative_matrix (vk_spirv.c).
 * Walked against the NV module glslang wrote, instruction by instruction: every instruction the
 * same but the cooperative-matrix ones, which carry the same operands in KHR's encoding (each
 * type's Use its role in the multiply-adds, each load's and store's layout its column-major
 * flag, the multiply-add's signedness all four), the three constants those name defined before
 * the types, the id bound raised by three, nothing of NV's left. Modules the rewrite does not
 * know are refused, never half rewritten, and corrupted ones never crash it.
 * Then on the device: where it has KHR int8 cooperative matrices, a context that takes them
 * (BITSPARK_VK_COOP=khr) gives mv_q's bits for prompts' products of Q1_0 and Q2_0 (9 and 41
 * rows: a partial tile, a whole one and a partial one); where it has none, asking for them is
 * refused with a reason. Without the validation layer: Debian's (1.3.239) predates the
 * extension and would reject its module; the bits are the check. */
#include "test.h"
#include "io/util.h"
#include "formats/quant.h"
#include "vulkan/vk_internal.h"

#include <stdlib.h>
#include <string.h>

enum { CAP = 17, EXT = 10, CONSTANT = 43, CONST_TRUE = 41, TYPE_INT = 21,
       T_NV = 5358, LOAD_NV = 5359, STORE_NV = 5360, MULADD_NV = 5361,
       T_KHR = 4456, LOAD_KHR = 4457, STORE_KHR = 4458, MULADD_KHR = 4459 };

typedef struct { const uint32_t *w; size_t n; uint32_t bound; } mod;

static const uint32_t *inst_at(const mod *m, size_t i) { return m->w + i; }
static uint32_t op_of(const uint32_t *w) { return w[0] & 0xffff; }
static uint32_t len_of(const uint32_t *w) { return w[0] >> 16; }

/* The value of a 32-bit OpConstant id (or ~0u), and where it is defined (word index). */
static uint32_t const_value(const mod *m, uint32_t id, size_t *at) {
    for (size_t i = 5; i < m->n; i += len_of(m->w + i))
        if (op_of(m->w + i) == CONSTANT && len_of(m->w + i) == 4 && m->w[i + 2] == id) {
            if (at) *at = i;
            return m->w[i + 3];
        }
    return ~0u;
}

static bool is_true(const mod *m, uint32_t id) {
    for (size_t i = 5; i < m->n; i += len_of(m->w + i))
        if (op_of(m->w + i) == CONST_TRUE && m->w[i + 2] == id) return true;
    return false;
}

/* The KHR module against the NV one it came from. */
static void walk(const mod *nv, const mod *kh) {
    CHECK(kh->w[0] == nv->w[0] && kh->w[1] == nv->w[1] && kh->w[2] == nv->w[2] && kh->w[4] == 0);
    CHECK_EQ_INT(kh->bound, nv->bound + 3);
    size_t i = 5, j = 5;
    int n_types = 0, n_load = 0, n_store = 0, n_muladd = 0, added = 0, ext = 0, cap = 0;
    size_t first_type = 0;
    while (i < nv->n && j < kh->n) {
        const uint32_t *a = inst_at(nv, i), *b = inst_at(kh, j);
        if (op_of(b) == CONSTANT && b[2] >= nv->bound) {   /* one of the three added constants */
            CHECK(b[2] < kh->bound && b[3] == b[2] - nv->bound);
            added++;
            j += len_of(b);
            continue;
        }
        const uint32_t oa = op_of(a), la = len_of(a);
        if (oa == CAP && a[1] == 5357) {
            CHECK(op_of(b) == CAP && b[1] == 6022);
            cap++;
        } else if (oa == EXT && !strcmp((const char *)(a + 1), "SPV_NV_cooperative_matrix")) {
            CHECK(op_of(b) == EXT && !strcmp((const char *)(b + 1), "SPV_KHR_cooperative_matrix"));
            ext++;
        } else if (oa == T_NV) {
            CHECK(op_of(b) == T_KHR && len_of(b) == 7 && !memcmp(a + 1, b + 1, 4 * 5));
            if (!first_type) first_type = j;
            n_types++;
        } else if (oa == LOAD_NV) {   /* type, id, pointer, stride, column-major, memory operands */
            CHECK(op_of(b) == LOAD_KHR && len_of(b) == la && !memcmp(a + 1, b + 1, 4 * 3) && b[5] == a[4] &&
                  !memcmp(a + 6, b + 6, 4 * (la - 6)));
            CHECK(const_value(kh, b[4], NULL) == (is_true(nv, a[5]) ? 1u : 0u));
            n_load++;
        } else if (oa == STORE_NV) {   /* pointer, object, stride, column-major, memory operands */
            CHECK(op_of(b) == STORE_KHR && len_of(b) == la && !memcmp(a + 1, b + 1, 4 * 2) && b[4] == a[3] &&
                  !memcmp(a + 5, b + 5, 4 * (la - 5)));
            CHECK(const_value(kh, b[3], NULL) == (is_true(nv, a[4]) ? 1u : 0u));
            n_store++;
        } else if (oa == MULADD_NV) {
            CHECK(op_of(b) == MULADD_KHR && len_of(b) == 7 && !memcmp(a + 1, b + 1, 4 * 5));
            CHECKF(b[6] == 0xf, "signedness mask %#x (int8 x int8 -> int32, all signed)", b[6]);
            n_muladd++;
        } else {
            CHECKF(la == len_of(b) && !memcmp(a, b, 4 * la), "instruction %u at word %zu changed", oa, i);
        }
        i += la;
        j += len_of(b);
    }
    CHECK(i == nv->n && j == kh->n);
    CHECK(added == 3 && cap == 1 && ext == 1 && n_types == 3 && n_load == 2 && n_store == 1 && n_muladd == 1);
    /* each type's Use: A, B, accumulator, as the multiply-add takes them; its constant first */
    for (size_t k = 5; k < kh->n; k += len_of(kh->w + k)) {
        const uint32_t *b = kh->w + k;
        if (op_of(b) != MULADD_KHR) continue;
        uint32_t ty[3] = {0, 0, b[1]};   /* a's and b's: the result types of the values they are */
        for (size_t q = 5; q < kh->n; q += len_of(kh->w + q))
            for (int r = 0; r < 2; r++)
                if (len_of(kh->w + q) >= 3 && kh->w[q + 2] == b[3 + r] && op_of(kh->w + q) != CONSTANT) ty[r] = kh->w[q + 1];
        for (uint32_t r = 0; r < 3; r++)
            for (size_t q = 5; q < kh->n; q += len_of(kh->w + q))
                if (op_of(kh->w + q) == T_KHR && kh->w[q + 1] == ty[r]) {
                    size_t at = 0;
                    const uint32_t use = const_value(kh, kh->w[q + 6], &at);
                    CHECKF(use == r, "operand %u's type: Use %u", r, use);
                    CHECK(at && at < first_type);
                }
    }
}

/* What the rewrite refuses, and corrupted modules it must survive. */
static void refusals(const mod *nv) {
    uint32_t *out = NULL;
    size_t n = 0;
    const bs_vk_spirv *plain = bs_vk_shader("mm_q");   /* no cooperative matrices at all */
    CHECK(plain && bs_vk_spirv_coop_khr(plain->code, plain->bytes / 4, &out, &n) != 0 && !out);
    CHECK(bs_vk_spirv_coop_khr(nv->w, 4, &out, &n) != 0 && !out);            /* no header */
    CHECK(bs_vk_spirv_coop_khr(nv->w, nv->n - 3, &out, &n) != 0 && !out);   /* truncated */
    uint32_t *w = malloc(4 * nv->n);
    memcpy(w, nv->w, 4 * nv->n);
    w[0] = 0x03022307;   /* the other byte order */
    CHECK(bs_vk_spirv_coop_khr(w, nv->n, &out, &n) != 0 && !out);
    memcpy(w, nv->w, 4 * nv->n);
    for (size_t i = 5; i < nv->n; i += len_of(w + i))   /* a load whose layout is not a constant */
        if (op_of(w + i) == LOAD_NV) { w[i + 5] = w[i + 4]; break; }
    CHECK(bs_vk_spirv_coop_khr(w, nv->n, &out, &n) != 0 && !out);
    bs_clear_error();
    /* single words changed at random: refused or rewritten, never a crash or a read out of bounds */
    bs_rng r;
    bs_rng_seed(&r, 7);
    int ok = 0;
    for (int t = 0; t < (TEST_SANITIZED ? 400 : 2000); t++) {
        memcpy(w, nv->w, 4 * nv->n);
        const size_t at = 1 + bs_rng_next(&r) % (nv->n - 1);
        w[at] = bs_rng_next(&r) % 3 == 0 ? (uint32_t)bs_rng_next(&r) : w[at] ^ (1u << (bs_rng_next(&r) % 32));
        if (bs_vk_spirv_coop_khr(w, nv->n, &out, &n) == 0) ok++;
        free(out);
        bs_clear_error();
    }
    printf("corrupted modules: %d of %d still rewritten, the rest refused\n", ok, TEST_SANITIZED ? 400 : 2000);
    free(w);
}

static bs_vk_matrix *upload(bs_vk_ctx *c, int type, int64_t d, int64_t rows, bs_rng *r, uint8_t **wq) {
    float *w = malloc(sizeof *w * (size_t)(d * rows));
    for (int64_t i = 0; i < d * rows; i++) w[i] = 0.05f * bs_rng_normal(r);
    const size_t rb = bs_row_size(type, d);
    *wq = malloc(rb * (size_t)rows);
    for (int64_t i = 0; i < rows; i++) bs_quantize(type, w + i * d, *wq + i * rb, d);
    const bs_vk_tensor T = {.type = type, .ne0 = d, .ne1 = rows, .data = *wq, .row_bytes = rb, .name = bs_type_name(type)};
    free(w);
    return bs_vk_matrix_new(c, &T);
}

/* Prompts' products by the KHR cooperative matrices against mv_q's, bit for bit. */
static void khr_products(int dev) {
    setenv("BITSPARK_VK_MM", "off", 1);
    bs_vk_ctx *c = bs_vk_open(dev);
    setenv("BITSPARK_VK_COOP", "khr", 1);
    setenv("BITSPARK_VK_MM", "coop", 1);
    setenv("BITSPARK_VK_MM_CHECK", "1", 1);   /* (the opening check of vk_mm.c as well) */
    bs_vk_ctx *k = bs_vk_open(dev);
    unsetenv("BITSPARK_VK_COOP"); unsetenv("BITSPARK_VK_MM"); unsetenv("BITSPARK_VK_MM_CHECK");
    bool khr = false;
    const bs_vk_coop_shape cs = k ? bs_vk_mm_coop(k, &khr) : (bs_vk_coop_shape){0, 0, 0};
    CHECKF(c && k && bs_vk_mm_mode(k) == BS_VK_MM_COOP && khr, "contexts: %s", bs_last_error());
    printf("device: KHR cooperative matrices %ux%ux%u\n", cs.m, cs.n, cs.k);
    static const int types[] = {BS_Q1_0, BS_Q2_0, BS_Q2_0_G64};
    static const int64_t shapes[][2] = {{256, 67}, {5120, 96}};
    bs_rng r;
    bs_rng_seed(&r, 3);
    enum { N = 41 };
    for (size_t t = 0; t < sizeof types / sizeof types[0] && c && k; t++)
        for (size_t s = 0; s < 2; s++) {
            const int64_t d = shapes[s][0], rows = shapes[s][1];
            uint8_t *wq = NULL;
            bs_vk_matrix *m = upload(c, types[t], d, rows, &r, &wq);
            const bs_vk_tensor T = {.type = types[t], .ne0 = d, .ne1 = rows, .data = wq, .row_bytes = bs_row_size(types[t], d)};
            bs_vk_matrix *mk = bs_vk_matrix_new(k, &T);
            float *x = malloc(sizeof *x * (size_t)(d * N)), *y = malloc(sizeof *y * (size_t)(rows * N));
            float *yk = malloc(sizeof *yk * (size_t)(rows * N));
            for (int64_t i = 0; i < d * N; i++) x[i] = bs_rng_normal(&r);
            for (int n = 9; n <= N && m && mk; n += N - 9) {
                CHECK(bs_vk_matvec(c, m, x, n, y) == 0 && bs_vk_matvec(k, mk, x, n, yk) == 0);
                CHECKF(!memcmp(y, yk, sizeof *y * (size_t)(rows * n)), "%s %lldx%lld, %d rows: KHR and mv_q differ",
                       bs_type_name(types[t]), (long long)rows, (long long)d, n);
            }
            bs_vk_matrix_free(c, m);
            bs_vk_matrix_free(k, mk);
            free(x); free(y); free(yk); free(wq);
        }
    bs_vk_close(k);
    bs_vk_close(c);
}

/* Where the device has no KHR shape: asking for it is refused with the reason, as is a bad value. */
static void khr_refused(int dev, const char *name) {
    setenv("BITSPARK_VK_COOP", "khr", 1);
    setenv("BITSPARK_VK_MM", "coop", 1);
    bs_vk_ctx *k = bs_vk_open(dev);
    CHECKF(!k && strstr(bs_last_error(), "cooperative matrix"), "BITSPARK_VK_COOP=khr on %s: %s", name, k ? "opened" : bs_last_error());
    bs_vk_close(k);
    setenv("BITSPARK_VK_COOP", "amd", 1);
    k = bs_vk_open(dev);
    CHECKF(!k && strstr(bs_last_error(), "BITSPARK_VK_COOP=amd"), "BITSPARK_VK_COOP=amd: %s", k ? "opened" : bs_last_error());
    bs_vk_close(k);
    unsetenv("BITSPARK_VK_COOP"); unsetenv("BITSPARK_VK_MM");
    bs_clear_error();
    printf("device: %s has no KHR int8 cooperative matrix mm_q takes: the products' part is not run here (refusals checked)\n", name);
}

int main(void) {
    if (!bs_vk_built()) { printf("skipped: this build has no Vulkan backend\n"); return 77; }
    const bs_vk_spirv *sp = bs_vk_shader("mm_q_coop");
    CHECK(sp != NULL);
    if (!sp) return test_summary("test_vulkan_spirv");
    const mod nv = {sp->code, sp->bytes / 4, sp->code[3]};
    uint32_t *out = NULL;
    size_t n = 0;
    CHECKF(bs_vk_spirv_coop_khr(nv.w, nv.n, &out, &n) == 0, "%s", bs_last_error());
    if (out) {
        const mod kh = {out, n, out[3]};
        walk(&nv, &kh);
        printf("mm_q_coop: %zu words (NV) -> %zu (KHR)\n", nv.n, kh.n);
        free(out);
    }
    refusals(&nv);
    bs_vk_device_info info[8];
    const int nd = bs_vk_devices(info, 8);
    if (nd <= 0) {
        printf("device part: not run (%s)\n", nd < 0 ? bs_last_error() : "no Vulkan device");
        bs_clear_error();
        return test_summary("test_vulkan_spirv");
    }
    int dev = bs_vk_pick(true);
    for (int i = 0; i < nd; i++)
        if (info[i].coop_khr.m && !info[dev].coop_khr.m) dev = i;
    if (info[dev].coop_khr.m) khr_products(dev);
    else khr_refused(dev, info[dev].name);
    return test_summary("test_vulkan_spirv");
}
