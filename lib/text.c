/* Texts made of a runtime's pools (text.h): the growing buffer, the copies of
 * the pools, and the two ways an entry point gives a text. */
#include "text.h"

#include "escape.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void text_reserve(struct text *o, size_t more)
{
    if (o->failed || o->len + more < o->cap)
        return;
    size_t cap = o->cap ? o->cap : 4096;
    while (cap <= o->len + more)
        cap *= 2;
    char *p = realloc(o->p, cap);
    if (!p) {
        o->failed = true;
        return;
    }
    o->p = p;
    o->cap = cap;
}

void gpumem__text_printf(struct text *o, const char *fmt, ...)
{
    va_list ap;
    text_reserve(o, 256);
    if (o->failed)
        return;
    va_start(ap, fmt);
    int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
        o->failed = true;
        return;
    }
    if ((size_t)n >= o->cap - o->len) { /* longer than the room made: once more */
        text_reserve(o, (size_t)n + 1);
        if (o->failed)
            return;
        va_start(ap, fmt);
        vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
    }
    o->len += (size_t)n;
}

/* A JSON string (quotes included), valid UTF-8 whatever s holds (escape.h);
 * NULL is null. */
void gpumem__text_string(struct text *o, const char *s)
{
    if (!s) {
        gpumem__text_printf(o, "null");
        return;
    }
    size_t max = GPUMEM_JSON_STRING_MAX(strlen(s));
    text_reserve(o, max + 1);
    if (o->failed)
        return;
    o->len += gpumem__json_string(s, o->p + o->len, o->cap - o->len);
}

/* Copies of the pools of logical devices [first, last] (no GPU: last is first -
 * 1, and there is none), one after the other; free_copies frees them. */
gpumem_status gpumem__text_copy_pools(gpumem_runtime *rt, int first, int last,
                                      struct pool_copy **out, struct reason *why)
{
    struct pool_copy *copies = calloc((size_t)(last - first + 1) + 1, sizeof *copies);
    gpumem_status s = GPUMEM_OK;
    *out = copies;
    if (!copies)
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "out of host memory for a snapshot");
    for (int l = first; l <= last && s == GPUMEM_OK; l++)
        s = gpumem__pool_copy(rt->logical[l].pool, &copies[l - first], why);
    return s;
}

void gpumem__text_free_copies(struct pool_copy *copies, int first, int last)
{
    for (int l = first; copies && l <= last; l++)
        gpumem__pool_copy_free(&copies[l - first]);
    free(copies);
}

/* Resolves, initializes and checks `logical` (-1: all) for entry point `api`,
 * and gives the range of logical devices. */
static gpumem_status snapshot_begin(gpumem_runtime **rt, const char *api, int logical,
                                    int *first, int *last)
{
    gpumem_status s = resolve_call(rt, api, OBJ_LOGICAL, logical, 0, NULL);
    if (s != GPUMEM_OK)
        return s;
    if ((s = gpumem__ensure_initialized(*rt, "the first gpumem snapshot")) != GPUMEM_OK)
        return s;
    if (logical != -1 &&
        (s = gpumem__check_logical_index(*rt, api, logical)) != GPUMEM_OK)
        return s;
    *first = logical == -1 ? 0 : logical;
    *last = logical == -1 ? (int)(*rt)->num_logical - 1 : logical;
    return GPUMEM_OK;
}

/* The two-call idiom of gpumem_snapshot_json and gpumem_history_trace: the text
 * that `format` makes, into buf; `what` names it in messages. */
gpumem_status gpumem__text_give(gpumem_runtime *rt, const char *api, const char *what,
                                text_format_fn format, int logical, char *buf,
                                size_t capacity, size_t *length)
{
    int first, last;
    struct reason why;
    struct text o = {0};
    gpumem_status s = snapshot_begin(&rt, api, logical, &first, &last);
    if (s != GPUMEM_OK)
        return s;
    if (!length || (!buf && capacity))
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s(/device:GPU:%d): %s", api,
                            logical,
                            !length ? "`length` is NULL"
                                    : "`buf` is NULL with a non-zero capacity");
    if ((s = format(rt, first, last, &o, &why)) != GPUMEM_OK) {
        s = gpumem__fail(s, "%s(/device:GPU:%d): %s", api, logical, why.text);
        goto out;
    }
    *length = o.len + 1;
    if (buf && o.len + 1 > capacity) {
        s = gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                         "%s(/device:GPU:%d): the %s is %zu bytes now and the "
                         "buffer holds %zu; *length is the size it needs now (it may "
                         "grow again: leave room, or call again)",
                         api, logical, what, o.len + 1, capacity);
        goto out;
    }
    if (buf) {
        memcpy(buf, o.p, o.len);
        buf[o.len] = '\0';
    }
out:
    free(o.p);
    return s;
}

/* Writes data[0, len) to `path` as a whole or not at all: into a new file in the
 * same folder (O_EXCL, O_NOFOLLOW: a name planted there is not written through),
 * renamed onto `path` once written and closed, so that a reader sees the old
 * file or the new one, never half of one. A symbolic link, or anything but a
 * regular file, at `path` itself is refused and left as it is: a link planted
 * where a snapshot goes must not lead the write to its target (issue 33, item 3).
 * The new file's mode is 0666 less the umask, as fopen's. */
static gpumem_status write_whole(const char *path, const char *data, size_t len,
                                 struct reason *why)
{
    static _Atomic unsigned counter;
    char q[GPUMEM_QUOTE_BUF], tmp[PATH_MAX];
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT,
                              "cannot write %s: %s; gpumem writes only a regular file "
                              "there, and never through a link",
                              gpumem__quote(path, q, sizeof q),
                              S_ISLNK(st.st_mode) ? "it is a symbolic link"
                                                  : "it is not a regular file");
    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path) + 1 : 0;
    int n = snprintf(tmp, sizeof tmp, "%.*s.%.100s.gpumem-%ld-%u.tmp", dir_len, path,
                     slash ? slash + 1 : path, gpumem__process_id(),
                     atomic_fetch_add(&counter, 1));
    if (n < 0 || (size_t)n >= sizeof tmp)
        return gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT,
                              "cannot write %s: the path is too long",
                              gpumem__quote(path, q, sizeof q));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0)
        return gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT, "cannot write %s: %s",
                              gpumem__quote(path, q, sizeof q), strerror(errno));
    size_t done = 0;
    int err = 0;
    while (done < len && !err) {
        ssize_t w = write(fd, data + done, len - done);
        if (w > 0)
            done += (size_t)w;
        else if (w < 0 && errno != EINTR)
            err = errno;
        else if (w == 0)
            err = EIO;
    }
    if (close(fd) != 0 && !err)
        err = errno;
    if (!err && rename(tmp, path) != 0)
        err = errno;
    if (err) {
        unlink(tmp);
        return gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT, "cannot write %s: %s",
                              gpumem__quote(path, q, sizeof q), strerror(err));
    }
    return GPUMEM_OK;
}

/* Writes the text that `format` makes of [first, last] to path. */
gpumem_status gpumem__text_write(gpumem_runtime *rt, text_format_fn format, int first,
                                 int last, const char *path, struct reason *why)
{
    struct text o = {0};
    gpumem_status s = format(rt, first, last, &o, why);
    if (s == GPUMEM_OK)
        s = write_whole(path, o.p ? o.p : "", o.len, why);
    free(o.p);
    return s;
}

gpumem_status gpumem__text_file(gpumem_runtime *rt, const char *api,
                                text_format_fn format, int logical, const char *path)
{
    int first, last;
    struct reason why;
    gpumem_status s = snapshot_begin(&rt, api, logical, &first, &last);
    if (s != GPUMEM_OK)
        return s;
    if (!path || !path[0])
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s(/device:GPU:%d): `path` is NULL or empty", api, logical);
    if ((s = gpumem__text_write(rt, format, first, last, path, &why)) != GPUMEM_OK)
        return gpumem__fail(s, "%s(/device:GPU:%d): %s", api, logical, why.text);
    return GPUMEM_OK;
}
