/* server_media.c: serve --media-path DIR, as llama-server: an image_url of the form
 * file://NAME (NAME relative to DIR, subdirectories allowed) is read from DIR. Without
 * --media-path every file: URL is refused, and remote URLs (http:, https:) always are: the
 * server fetches nothing from the network. NAME may not be absolute, hold a ".." component or a
 * control byte, and the file it resolves to (symbolic links followed) must lie inside DIR. */
#include "server/server.h"
#include "io/util.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static char root[PATH_MAX];   /* realpath of --media-path, "" when not given */

void srv_media_set_path(const char *dir) {
    root[0] = 0;
    if (dir && !realpath(dir, root)) root[0] = 0;
}

static bool bad_name(const char *p, size_t n) {
    if (n == 0 || p[0] == '/') return true;
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)p[i] < 32 || p[i] == 127 || p[i] == '\\') return true;
        const bool start = i == 0 || p[i - 1] == '/';
        if (start && p[i] == '.' && i + 1 < n && p[i + 1] == '.' && (i + 2 == n || p[i + 2] == '/')) return true;
    }
    return false;
}

int srv_media_read(const char *url, size_t n, size_t max_bytes, unsigned char **out, size_t *len, char *err,
                   size_t errlen) {
    if (!root[0])
        return bs_errbuf(err, errlen, "image_url: remote URLs are not fetched; send the image as a data: URL (file:// URLs need --media-path DIR)");
    const char *name = url + 7;
    const size_t nl = n - 7;
    if (nl >= PATH_MAX - strlen(root) - 2 || bad_name(name, nl))
        return bs_errbuf(err, errlen, "image_url: a file:// URL names a file below --media-path, without '..' or a leading '/'");
    char path[PATH_MAX * 2], real[PATH_MAX];
    snprintf(path, sizeof path, "%s/%.*s", root, (int)nl, name);
    const size_t rl = strlen(root);
    struct stat st;
    if (!realpath(path, real) || stat(real, &st) || !S_ISREG(st.st_mode))
        return bs_errbuf(err, errlen, "image_url: no such file in --media-path");
    if (strncmp(real, root, rl) || (real[rl] != '/' && !(rl == 1 && root[0] == '/')))   /* (root "/": any) */
        return bs_errbuf(err, errlen, "image_url: the file lies outside --media-path");
    if ((size_t)st.st_size > max_bytes)
        return bs_errbuf(err, errlen, "image_url: the image is %lld bytes, more than the limit of %zu",
                         (long long)st.st_size, max_bytes);
    size_t got = 0;
    char *data = bs_read_file(real, &got);
    if (!data) return bs_errbuf(err, errlen, "image_url: the file cannot be read");
    if (got > max_bytes) {
        free(data);
        return bs_errbuf(err, errlen, "image_url: the image is more than the limit of %zu bytes", max_bytes);
    }
    *out = (unsigned char *)data;
    *len = got;
    return 0;
}
