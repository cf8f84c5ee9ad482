/* test.h: the tiny check macros every C test uses. A failed check prints file:line and the
 * expression and is counted; a test's main ends with `return test_summary("name");`, which is
 * nonzero when any check failed. */
#ifndef BS_TEST_H
#define BS_TEST_H

#include <stdio.h>
#include <string.h>

static int test_failures, test_checks;

/* TEST_SANITIZED: 1 in an ASan build. The heaviest tests then run the same checks on fewer
 * samples or models (each path of the host code still once); the release build runs them all. */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_SANITIZED 1
#endif
#endif
#ifndef TEST_SANITIZED
#define TEST_SANITIZED 0
#endif

#define CHECK(cond) do { test_checks++; if (!(cond)) { test_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
/* CHECK with a printf-style explanation printed on failure. */
#define CHECKF(cond, ...) do { test_checks++; if (!(cond)) { test_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define CHECK_EQ_INT(a, b) CHECKF((long long)(a) == (long long)(b), "%lld != %lld", \
    (long long)(a), (long long)(b))
#define CHECK_STR(a, b) CHECKF((a) && (b) && strcmp((a), (b)) == 0, "'%s' != '%s'", \
    (a) ? (a) : "(null)", (b) ? (b) : "(null)")

static inline int test_summary(const char *name) {
    printf("%s: %d checks, %d failed\n", name, test_checks, test_failures);
    return test_failures != 0;
}

#endif
