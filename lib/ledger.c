/* The per-GPU ledger shared by processes: a fixed-size file mapped MAP_SHARED, a
 * header and one slot per process. Invariants: a slot is live exactly while an
 * OFD write lock on its first byte is held (the kernel drops it when the holder
 * dies), and only live slots count; a slot's figures are written by its owner
 * alone, with atomics; admissions run under an OFD lock on byte 0, waited for a
 * bounded time. Process-local locks: registry_lock (fds, fork) and l->admit_lock
 * (threads of one process, whose OFD locks do not exclude each other).
 *
 * Why these choices (docs/ledger.md has the whole protocol):
 * - OFD locks (F_OFD_SETLK), not classic POSIX record locks: those belong to the
 *   process, so any close() of any fd of the file in the process drops them all,
 *   and two ledgers of one process could not exclude each other. Not a robust
 *   mutex in the file: its owner is a tid that pid namespaces and reuse make
 *   ambiguous, and a hostile writer of the file can forge it.
 * - Liveness never reads a pid: pid, start time, uid and command name are for
 *   display. A forked child must hold no reference to the parent's open file
 *   description, or the parent's slot lock would outlive the parent: the child
 *   closes its copy of every ledger fd at the fork, and the mapping, which
 *   references it too, is not inherited at all (MADV_DONTFORK).
 * - A ledger is its user's own (issue 33): mode 0600, and a file owned by
 *   another user or open to anyone else is refused before it is mapped, so that
 *   no other user can shorten it under a mapping (SIGBUS) or forge its figures.
 *   A reader never maps a ledger (it copies slots with pread), so that it may
 *   read other users' ledgers (gpumem-smi as root) at no risk.
 * - Validation reads the header with pread before anything is mapped, and the
 *   file's size is checked again (fstat) before each admission, request and
 *   read, so a file truncated meanwhile is refused rather than faulted on. The
 *   residual risk (truncated by the user's own processes between that check and
 *   an access) is in the doc.
 * - Admission counts, per logical device, the larger of what a process admitted
 *   and what it took from the driver, against the GPU's total bytes; with a
 *   free-memory query, the bytes to take must also fit what the driver says is
 *   free less what others admitted but have not taken yet (conservative: a
 *   process takes from the driver first and publishes after). */
#include "ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LEDGER_MAGIC       UINT64_C(0x72676c6d656d7067) /* "gpmemlgr" */
#define LEDGER_VERSION     2u                           /* 2: a name per logical device */
#define LEDGER_HEADER_SIZE 256u
#define LEDGER_ADMIT_BYTE  0 /* the admission lock's byte */
#define LEDGER_WAIT_MS     2000u
#define LEDGER_SLICE_MS    50u /* a requester re-checks its givers' liveness this often */
/* the most a plan waits for others' takes (settle_takes) */
#define LEDGER_TAKE_WAIT_MS 2000u

enum { SLOT_FREE = 0, SLOT_LIVE = 1 };

/* ------------------------------------------------------------- layout -- */

/* The file: header, then slot_count slots. Fields without _Atomic are written
 * once, before the file is linked into place, and only read after. */
struct ledger_header {
    uint64_t magic;
    uint32_t version;
    uint32_t header_size;
    uint32_t slot_size;
    uint32_t slot_count;
    uint32_t device_count; /* figures per slot: GPUMEM_LEDGER_DEVICES */
    uint32_t unused0;
    uint64_t total_bytes;
    char uuid[64];                 /* NUL-terminated */
    _Atomic uint32_t request_seq;  /* futex word: bumped by each give-back request */
    _Atomic uint32_t ack_word;     /* futex word: bumped by each acknowledgement */
    _Atomic uint32_t request_slot; /* the latest requester's slot + 1; 0 = none */
    uint32_t unused1;
    _Atomic uint64_t request_bytes; /* what the latest requester lacks (a hint) */
    uint8_t pad[LEDGER_HEADER_SIZE - 128];
};

struct ledger_dev {
    _Atomic uint32_t policy;
    uint32_t unused;
    _Atomic uint64_t limit;
    _Atomic uint64_t admitted;
    struct ledger_usage usage;                         /* reserved, in_use, peak */
    _Atomic uint64_t name[GPUMEM_LEDGER_NAME_LEN / 8]; /* NUL-padded */
};

struct ledger_slot {
    _Atomic uint32_t claim_seq; /* odd while the identity is being (re)written */
    _Atomic uint32_t state;     /* SLOT_FREE or SLOT_LIVE: a hint, liveness is the lock */
    _Atomic uint32_t ack_seq;   /* the last request_seq its give-back thread answered */
    _Atomic uint32_t gives;     /* 1 while its give-back thread runs */
    _Atomic int64_t pid;
    _Atomic uint64_t start_time;
    _Atomic uint32_t uid;
    _Atomic uint32_t num_devices; /* dev[] entries set; readers clamp it */
    _Atomic uint64_t comm[2];     /* the command name, 16 bytes */
    _Atomic uint64_t taking;      /* bytes the process is taking from the driver now,
                                     admitted and about to be published as reserved
                                     (gpumem__ledger_taking; 0 in a file written by a
                                     version before it, whose 8 bytes here were
                                     padding) */
    struct ledger_dev dev[GPUMEM_LEDGER_DEVICES];
};

_Static_assert(sizeof(struct ledger_header) == LEDGER_HEADER_SIZE, "header layout");
_Static_assert(offsetof(struct ledger_header, request_seq) == 104, "header layout");
_Static_assert(offsetof(struct ledger_header, request_bytes) == 120, "header layout");
_Static_assert(sizeof(struct ledger_dev) == 80, "device figures layout");
_Static_assert(offsetof(struct ledger_dev, usage) == 24, "device figures layout");
_Static_assert(offsetof(struct ledger_slot, dev) == 64, "slot layout");
_Static_assert(sizeof(struct ledger_slot) == 64 + 80 * GPUMEM_LEDGER_DEVICES,
               "slot layout");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "the ledger's figures are shared by processes: they must be lock-free");

struct ledger {
    char path[PATH_MAX];
    int fd;
    bool read_only;            /* then hdr is a copy read with pread, never a mapping */
    unsigned long uid;         /* the user whose ledger it is: its file's owner */
    unsigned generation;       /* the fork generation that opened it */
    struct ledger_header *hdr; /* the mapping, or `copy` */
    void *copy;                /* read-only: the reader's copy of the file */
    size_t map_size;
    unsigned slot_count;
    uint64_t total_bytes;
    int slot; /* -1 = none */
    unsigned lock_wait_ms;
    gpumem_mutex admit_lock;
    /* give-back thread */
    bool helper_started;
    pthread_t helper;
    ledger_give_fn give_fn;
    void *give_ctx;
    _Atomic bool stop;
    _Atomic bool helper_done;
};

static struct ledger_slot *slot_at(const struct ledger *l, unsigned i)
{
    /* the slots follow the header (sizeof it is LEDGER_HEADER_SIZE, asserted) */
    return (struct ledger_slot *)(l->hdr + 1) + i;
}

static off_t slot_offset(unsigned i)
{
    return (off_t)LEDGER_HEADER_SIZE + (off_t)i * (off_t)sizeof(struct ledger_slot);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_us(unsigned us)
{
    struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------- fork and fds -- */

/* Every open ledger's fd, so that a forked child closes its copies: an OFD lock
 * lives as long as any reference to its open file description (an fd, or a
 * mapping: see gpumem__ledger_open), so a child keeping one would keep its
 * parent's slot alive after the parent died. registry_lock is taken around
 * open+register, mmap+madvise and close+unregister, and across fork()
 * (prepare), so no reference escapes into a child unregistered. */
static gpumem_mutex registry_lock = GPUMEM_MUTEX_INITIALIZER(GPUMEM_RANK_LEDGER_FDS);
static int registry[GPUMEM_LEDGER_MAX_OPEN]; /* fd + 1; 0 = empty */
static _Atomic unsigned generation;          /* one more in each forked child */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void) { gpumem__mutex_lock(&registry_lock); }
static void fork_parent(void) { gpumem__mutex_unlock(&registry_lock); }

/* In the child, on its only thread. */
static void fork_child(void)
{
    for (size_t i = 0; i < GPUMEM_LEDGER_MAX_OPEN; i++) {
        if (registry[i])
            close(registry[i] - 1);
        registry[i] = 0;
    }
    atomic_fetch_add_explicit(&generation, 1, memory_order_relaxed);
    /* The child's thread is the copy of the one that took it in fork_prepare:
     * letting it go, rather than making it anew, also keeps that thread's record
     * of the locks it holds (platform.c) true. */
    gpumem__mutex_unlock(&registry_lock);
}

static void fork_watch(void) { gpumem__atfork(fork_prepare, fork_parent, fork_child); }

static bool inherited(const struct ledger *l)
{
    return l->generation != atomic_load_explicit(&generation, memory_order_relaxed);
}

/* pre: registry_lock held. */
static bool registry_add(int fd)
{
    for (size_t i = 0; i < GPUMEM_LEDGER_MAX_OPEN; i++) {
        if (!registry[i]) {
            registry[i] = fd + 1;
            return true;
        }
    }
    return false;
}

/* Closes fd and forgets it; in the generation that opened it only. */
static void registry_close(int fd)
{
    gpumem__mutex_lock(&registry_lock);
    for (size_t i = 0; i < GPUMEM_LEDGER_MAX_OPEN; i++)
        if (registry[i] == fd + 1)
            registry[i] = 0;
    close(fd);
    gpumem__mutex_unlock(&registry_lock);
}

/* -------------------------------------------------------------- locks -- */

/* An OFD lock on one byte: F_OFD_SETLK (take or, with F_UNLCK, drop) or
 * F_OFD_GETLK (test). Returns fcntl's result; for GETLK, *type gets the type
 * of a conflicting lock, or F_UNLCK. */
static int ofd_lock(int fd, int cmd, short type, off_t at, short *conflict)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = at;
    fl.l_len = 1;
    int r;
    do
        r = fcntl(fd, cmd, &fl);
    while (r < 0 && errno == EINTR);
    if (conflict)
        *conflict = fl.l_type;
    return r;
}

/* Whether another open file description holds slot i's lock: its owner is alive.
 * A failed test says alive, which only makes admission stricter. */
static bool slot_alive(const struct ledger *l, unsigned i)
{
    if ((int)i == l->slot)
        return true;
    short type = F_UNLCK;
    if (ofd_lock(l->fd, F_OFD_GETLK, F_RDLCK, slot_offset(i), &type) < 0)
        return true;
    return type != F_UNLCK;
}

static bool lock_busy(int err) { return err == EAGAIN || err == EACCES; }

/* Takes the admission lock, retrying for at most l->lock_wait_ms: its holder
 * only sums figures, and a dead holder's lock is dropped by the kernel, so a
 * longer wait means a stopped or hostile holder, and the caller goes on alone. */
static gpumem_status admission_lock(struct ledger *l, struct reason *why)
{
    char q[GPUMEM_QUOTE_BUF];
    uint64_t deadline = now_ms() + l->lock_wait_ms;
    unsigned pause_us = 100;
    for (;;) {
        if (ofd_lock(l->fd, F_OFD_SETLK, F_WRLCK, LEDGER_ADMIT_BYTE, NULL) == 0)
            return GPUMEM_OK;
        if (!lock_busy(errno))
            return gpumem__reason(why, GPUMEM_ERR_BACKEND,
                                  "ledger %s: cannot lock it for admission: %s",
                                  gpumem__quote(l->path, q, sizeof q), strerror(errno));
        uint64_t now = now_ms();
        if (now >= deadline)
            return gpumem__reason(why, GPUMEM_ERR_BACKEND,
                                  "ledger %s: another process held its admission lock "
                                  "for more than %u ms (stopped?)",
                                  gpumem__quote(l->path, q, sizeof q), l->lock_wait_ms);
        uint64_t left_us = (deadline - now) * 1000u;
        sleep_us((unsigned)gpumem__min_u64(pause_us, left_us));
        pause_us = pause_us < 10000 ? pause_us * 2 : 10000;
    }
}

static void admission_unlock(struct ledger *l)
{
    ofd_lock(l->fd, F_OFD_SETLK, F_UNLCK, LEDGER_ADMIT_BYTE, NULL);
}

/* ----------------------------------------------------------------- futex -- */

/* FUTEX_WAIT on a word of the shared mapping (not _PRIVATE: other processes
 * wake it). Returns 0 or an errno (EAGAIN: the word had changed; ETIMEDOUT). */
static int futex_wait(_Atomic uint32_t *word, uint32_t expected, unsigned timeout_ms)
{
    struct timespec ts = {(time_t)(timeout_ms / 1000u),
                          (long)(timeout_ms % 1000u) * 1000000L};
    long r = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected,
                     timeout_ms ? &ts : NULL, NULL, 0);
    return r == 0 ? 0 : errno;
}

static void futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* ------------------------------------------------------------ identity -- */

/* This process's start time in clock ticks after boot: /proc/self/stat field 22,
 * counted after the command name's closing parenthesis (the name may hold spaces
 * and parentheses). 0 when it cannot be read. */
static uint64_t start_time_of_self(void)
{
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    /* after ')' comes field 3 (state); field 22 is 19 fields further */
    p++;
    for (int field = 2; field < 22 && p; field++) {
        p = strchr(p + 1, ' ');
    }
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

static void comm_of_self(char out[GPUMEM_LEDGER_COMM_LEN])
{
    memset(out, 0, GPUMEM_LEDGER_COMM_LEN);
    int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, out, GPUMEM_LEDGER_COMM_LEN - 1);
    close(fd);
    if (n <= 0) {
        out[0] = '\0';
        return;
    }
    out[n] = '\0';
    char *nl = strchr(out, '\n');
    if (nl)
        *nl = '\0';
}

/* Zeroes slot i's figures and identity. pre: its lock held by this process. */
static void slot_reset(struct ledger_slot *s)
{
    atomic_store(&s->state, SLOT_FREE);
    atomic_store(&s->gives, 0);
    atomic_store(&s->pid, 0);
    atomic_store(&s->start_time, 0);
    atomic_store(&s->uid, 0);
    atomic_store(&s->num_devices, 0);
    atomic_store(&s->comm[0], 0);
    atomic_store(&s->comm[1], 0);
    atomic_store(&s->taking, 0);
    for (unsigned d = 0; d < GPUMEM_LEDGER_DEVICES; d++) {
        struct ledger_dev *v = &s->dev[d];
        atomic_store_explicit(&v->policy, 0, memory_order_relaxed);
        atomic_store_explicit(&v->limit, 0, memory_order_relaxed);
        atomic_store_explicit(&v->admitted, 0, memory_order_relaxed);
        atomic_store_explicit(&v->usage.reserved, 0, memory_order_relaxed);
        atomic_store_explicit(&v->usage.in_use, 0, memory_order_relaxed);
        atomic_store_explicit(&v->usage.peak, 0, memory_order_relaxed);
        for (unsigned w = 0; w < GPUMEM_LEDGER_NAME_LEN / 8; w++)
            atomic_store_explicit(&v->name[w], 0, memory_order_relaxed);
    }
}

/* ------------------------------------------------------ open and close -- */

static bool uuid_ok(const char *uuid)
{
    size_t n = 0;
    for (; uuid[n]; n++) {
        char c = uuid[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '-' || c == '_';
        if (!ok || n >= GPUMEM_LEDGER_UUID_MAX)
            return false;
    }
    return n > 0;
}

bool gpumem__ledger_file_name(const char *dir, const char *uuid, unsigned long uid,
                              char *out, size_t size)
{
    int n = snprintf(out, size, "%s/gpumem-%s.u%lu.ledger", dir ? dir : "/dev/shm", uuid,
                     uid);
    return n >= 0 && (size_t)n < size;
}

static size_t file_size_for(unsigned slots)
{
    return LEDGER_HEADER_SIZE + (size_t)slots * sizeof(struct ledger_slot);
}

/* Builds a new ledger under a temporary name and links it into place: link()
 * fails if another process linked its own first (then that one is used), and
 * never replaces a ledger in use as rename() would. No one ever sees a file
 * whose header is not written. */
static gpumem_status create_file(const char *dir, const char *path,
                                 const struct ledger_params *p, struct reason *why)
{
    static _Atomic unsigned counter;
    char tmp[PATH_MAX], q[GPUMEM_QUOTE_BUF];
    int n = snprintf(tmp, sizeof tmp, "%s/.gpumem-%s.ledger.%ld.%u", dir, p->uuid,
                     gpumem__process_id(), atomic_fetch_add(&counter, 1));
    if (n < 0 || (size_t)n >= sizeof tmp)
        return gpumem__reason(why, GPUMEM_ERR_BACKEND, "ledger folder %s: path too long",
                              gpumem__quote(dir, q, sizeof q));
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return gpumem__reason(why, GPUMEM_ERR_BACKEND, "ledger %s: cannot create %s: %s",
                              gpumem__quote(path, q, sizeof q), tmp, strerror(errno));
    gpumem_status s = GPUMEM_OK;
    unsigned slots = p->slots ? p->slots : GPUMEM_LEDGER_SLOTS;
    struct ledger_header h;
    memset(&h, 0, sizeof h);
    h.magic = LEDGER_MAGIC;
    h.version = LEDGER_VERSION;
    h.header_size = LEDGER_HEADER_SIZE;
    h.slot_size = (uint32_t)sizeof(struct ledger_slot);
    h.slot_count = slots;
    h.device_count = GPUMEM_LEDGER_DEVICES;
    h.total_bytes = p->total_bytes;
    snprintf(h.uuid, sizeof h.uuid, "%s", p->uuid);
    /* 0600 whatever the umask: the file is its user's alone (docs/ledger.md, "Who
     * may share"); fchmod, so that a umask cannot take the owner's own access */
    if (ftruncate(fd, (off_t)file_size_for(slots)) != 0 ||
        pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || fchmod(fd, 0600) != 0) {
        s = gpumem__reason(why, GPUMEM_ERR_BACKEND, "ledger %s: cannot write %s: %s",
                           gpumem__quote(path, q, sizeof q), tmp, strerror(errno));
    } else if (link(tmp, path) != 0 && errno != EEXIST) {
        s = gpumem__reason(why, GPUMEM_ERR_BACKEND,
                           "ledger %s: cannot link it from %s: %s",
                           gpumem__quote(path, q, sizeof q), tmp, strerror(errno));
    }
    unlink(tmp);
    close(fd);
    return s;
}

/* Checks, before anything is mapped, that the file is a ledger of this layout
 * and this GPU, reading it with pread so that a short or hostile file can only
 * fail a check. */
static gpumem_status validate(struct ledger *l, const struct ledger_params *p,
                              struct reason *why)
{
    char q[GPUMEM_QUOTE_BUF];
    const char *name = gpumem__quote(l->path, q, sizeof q);
    struct stat st;
    if (fstat(l->fd, &st) != 0)
        return gpumem__reason(why, GPUMEM_ERR_BACKEND, "ledger %s: cannot stat it: %s",
                              name, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return gpumem__reason(why, GPUMEM_ERR_BACKEND, "ledger %s: not a regular file",
                              name);
    /* a ledger is its user's own: a file another user made, or one that others
     * may open, is not used (docs/ledger.md, "Who may share") */
    if ((unsigned long)st.st_uid != l->uid)
        return gpumem__reason(why, GPUMEM_ERR_BACKEND,
                              "ledger %s: owned by user %lu, not %lu: a ledger is its "
                              "user's own, and this one is not used",
                              name, (unsigned long)st.st_uid, l->uid);
    if (st.st_mode & 077)
        return gpumem__reason(why, GPUMEM_ERR_BACKEND,
                              "ledger %s: mode 0%o lets other users open it: a ledger "
                              "is its user's own (0600), and this one is not used",
                              name, (unsigned)(st.st_mode & 0777));
    struct ledger_header h;
    memset(&h, 0, sizeof h);
    if (st.st_size < (off_t)sizeof h)
        return gpumem__reason(why, GPUMEM_ERR_BACKEND,
                              "ledger %s: truncated (%lld bytes, less than its header)",
                              name, (long long)st.st_size);
    ssize_t got = pread(l->fd, &h, sizeof h, 0);
    if (got != (ssize_t)sizeof h)
        return gpumem__reason(why, GPUMEM_ERR_BACKEND, "ledger %s: cannot read it: %s",
                              name, got < 0 ? strerror(errno) : "short read");
    if (h.magic != LEDGER_MAGIC)
        return gpumem__reason(why, GPUMEM_ERR_BACKEND,
                              "ledger %s: not a gpumem ledger (bad magic)", name);
    if (h.version != LEDGER_VERSION)
        return gpumem__reason(why, GPUMEM_ERR_BACKEND,
                              "ledger %s: layout version %u, this library knows %u", name,
                              h.version, LEDGER_VERSION);
    if (h.header_size != LEDGER_HEADER_SIZE ||
        h.slot_size != sizeof(struct ledger_slot) ||
        h.device_count != GPUMEM_LEDGER_DEVICES)
        return gpumem__reason(why, GPUMEM_ERR_BACKEND,
                              "ledger %s: sizes (header %u, slot %u, devices %u) differ "
                              "from this library's (%u, %u, %u)",
                              name, h.header_size, h.slot_size, h.device_count,
                              LEDGER_HEADER_SIZE, (unsigned)sizeof(struct ledger_slot),
                              (unsigned)GPUMEM_LEDGER_DEVICES);
    if (h.slot_count < 1 || h.slot_count > GPUMEM_LEDGER_MAX_SLOTS)
        return gpumem__reason(why, GPUMEM_ERR_BACKEND,
                              "ledger %s: %u slots, not within 1..%u", name, h.slot_count,
                              GPUMEM_LEDGER_MAX_SLOTS);
    if ((uint64_t)st.st_size != file_size_for(h.slot_count))
        return gpumem__reason(
            why, GPUMEM_ERR_BACKEND, "ledger %s: %lld bytes, %zu expected for %u slots%s",
            name, (long long)st.st_size, file_size_for(h.slot_count), h.slot_count,
            (uint64_t)st.st_size < file_size_for(h.slot_count) ? " (truncated)" : "");
    if (memchr(h.uuid, '\0', sizeof h.uuid) == NULL || strcmp(h.uuid, p->uuid) != 0)
        return gpumem__reason(why, GPUMEM_ERR_BACKEND,
                              "ledger %s: made for another GPU (its UUID differs)", name);
    if (!p->read_only && h.total_bytes != p->total_bytes)
        return gpumem__reason(why, GPUMEM_ERR_BACKEND,
                              "ledger %s: says the GPU has %llu bytes, the driver %llu",
                              name, (unsigned long long)h.total_bytes,
                              (unsigned long long)p->total_bytes);
    l->slot_count = h.slot_count;
    l->total_bytes = h.total_bytes;
    l->map_size = file_size_for(h.slot_count);
    return GPUMEM_OK;
}

/* The file is still as long as at open: checked before each admission, request
 * and read, so that a file truncated by someone else is refused instead of
 * raising SIGBUS at the next access of the mapping. */
static gpumem_status check_size(const struct ledger *l, struct reason *why)
{
    struct stat st;
    char q[GPUMEM_QUOTE_BUF];
    if (fstat(l->fd, &st) != 0 || (uint64_t)st.st_size != l->map_size)
        return gpumem__reason(why, GPUMEM_ERR_BACKEND,
                              "ledger %s: the file changed size since it was opened",
                              gpumem__quote(l->path, q, sizeof q));
    return GPUMEM_OK;
}

/* Claims the first slot whose lock can be taken (free, or its owner dead),
 * under the admission lock so that no admission meanwhile counts the dead
 * owner's leftovers half-erased, and keeps its lock for life. */
static gpumem_status claim(struct ledger *l, struct reason *why)
{
    gpumem_status s = admission_lock(l, why);
    if (s != GPUMEM_OK)
        return s;
    char q[GPUMEM_QUOTE_BUF];
    int err = 0;
    for (unsigned i = 0; i < l->slot_count; i++) {
        if (ofd_lock(l->fd, F_OFD_SETLK, F_WRLCK, slot_offset(i), NULL) == 0) {
            l->slot = (int)i;
            break;
        }
        if (!lock_busy(errno)) {
            err = errno;
            break;
        }
    }
    if (l->slot < 0) {
        s = err ? gpumem__reason(why, GPUMEM_ERR_BACKEND,
                                 "ledger %s: cannot lock a slot: %s",
                                 gpumem__quote(l->path, q, sizeof q), strerror(err))
                : gpumem__reason(why, GPUMEM_ERR_BACKEND,
                                 "ledger %s: all %u slots are held by live processes",
                                 gpumem__quote(l->path, q, sizeof q), l->slot_count);
        goto out;
    }
    struct ledger_slot *me = slot_at(l, (unsigned)l->slot);
    char comm[GPUMEM_LEDGER_COMM_LEN];
    comm_of_self(comm);
    uint64_t words[2];
    memcpy(words, comm, sizeof words);
    atomic_fetch_add(&me->claim_seq, 1);
    slot_reset(me);
    atomic_store(&me->pid, (int64_t)gpumem__process_id());
    atomic_store(&me->start_time, start_time_of_self());
    atomic_store(&me->uid, (uint32_t)getuid());
    atomic_store(&me->comm[0], words[0]);
    atomic_store(&me->comm[1], words[1]);
    atomic_store(&me->ack_seq, atomic_load(&l->hdr->request_seq));
    atomic_store(&me->state, SLOT_LIVE);
    atomic_fetch_add(&me->claim_seq, 1);
out:
    admission_unlock(l);
    return s;
}

gpumem_status gpumem__ledger_open(const struct ledger_params *p, struct ledger **out,
                                  struct reason *why)
{
    *out = NULL;
    if (!p->uuid || !uuid_ok(p->uuid))
        return gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT,
                              "ledger: a GPU UUID of 1 to %d letters, digits, '-' or '_' "
                              "is needed to name the file",
                              GPUMEM_LEDGER_UUID_MAX);
    if ((!p->read_only && p->total_bytes == 0) || p->slots > GPUMEM_LEDGER_MAX_SLOTS)
        return gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT,
                              "ledger: the GPU's total bytes must be > 0 and the slots "
                              "at most %u",
                              GPUMEM_LEDGER_MAX_SLOTS);
    pthread_once(&fork_once, fork_watch);

    struct ledger *l = calloc(1, sizeof *l);
    if (!l)
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "ledger: out of host memory");
    l->fd = -1;
    l->slot = -1;
    l->read_only = p->read_only;
    l->lock_wait_ms = p->lock_wait_ms ? p->lock_wait_ms : LEDGER_WAIT_MS;
    l->hdr = MAP_FAILED;
    gpumem__mutex_init(&l->admit_lock, GPUMEM_RANK_LEDGER_ADMIT);
    const char *dir = p->dir ? p->dir : "/dev/shm";
    char q[GPUMEM_QUOTE_BUF];
    gpumem_status s = GPUMEM_OK;
    l->uid = p->of_user ? (unsigned long)p->user : (unsigned long)geteuid();
    if (p->of_user && !p->read_only && l->uid != (unsigned long)geteuid()) {
        s = gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT,
                           "ledger: another user's ledger may only be read");
        goto fail;
    }
    if (!gpumem__ledger_file_name(dir, p->uuid, l->uid, l->path, sizeof l->path)) {
        s = gpumem__reason(why, GPUMEM_ERR_BACKEND, "ledger folder %s: path too long",
                           gpumem__quote(dir, q, sizeof q));
        goto fail;
    }

    /* O_NONBLOCK: a FIFO put in the ledger's place must not block the open;
     * O_NOFOLLOW: nor a link lead the writes elsewhere */
    int flags = (p->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
    for (int attempt = 0; l->fd < 0; attempt++) {
        gpumem__mutex_lock(&registry_lock);
        int fd = open(l->path, flags);
        int err = errno;
        if (fd >= 0 && !registry_add(fd)) {
            close(fd);
            gpumem__mutex_unlock(&registry_lock);
            s = gpumem__reason(why, GPUMEM_ERR_BACKEND,
                               "ledger %s: this process has %d ledgers open already",
                               gpumem__quote(l->path, q, sizeof q),
                               GPUMEM_LEDGER_MAX_OPEN);
            goto fail;
        }
        l->generation = atomic_load(&generation);
        gpumem__mutex_unlock(&registry_lock);
        if (fd >= 0) {
            l->fd = fd;
        } else if (err == ENOENT && !p->read_only && attempt < 3) {
            if ((s = create_file(dir, l->path, p, why)) != GPUMEM_OK)
                goto fail;
        } else {
            s = gpumem__reason(why, GPUMEM_ERR_BACKEND, "ledger %s: cannot open it: %s",
                               gpumem__quote(l->path, q, sizeof q), strerror(err));
            goto fail;
        }
    }
    if ((s = validate(l, p, why)) != GPUMEM_OK)
        goto fail;
    if (p->read_only) {
        /* a reader never maps the file: whoever may write it could shorten it
         * under a mapping, and the reader would die of SIGBUS; it reads copies
         * with pread instead (read_slot), which a shorter file only cuts short */
        l->copy = calloc(1, l->map_size);
        if (!l->copy) {
            s = gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                               "ledger: out of host memory");
            goto fail;
        }
        l->hdr = l->copy;
        *out = l;
        return GPUMEM_OK;
    }
    /* A mapping holds its open file description as an fd does: inherited by a
     * forked child, it would keep this process's slot lock alive after this
     * process died. So it is not inherited (MADV_DONTFORK), and is made under
     * registry_lock so that no fork() copies it in between. */
    gpumem__mutex_lock(&registry_lock);
    void *map = mmap(NULL, l->map_size, PROT_READ | (p->read_only ? 0 : PROT_WRITE),
                     MAP_SHARED, l->fd, 0);
    int err = errno;
    if (map != MAP_FAILED && madvise(map, l->map_size, MADV_DONTFORK) != 0) {
        err = errno;
        munmap(map, l->map_size);
        map = MAP_FAILED;
    }
    gpumem__mutex_unlock(&registry_lock);
    if (map == MAP_FAILED) {
        s = gpumem__reason(why, GPUMEM_ERR_BACKEND, "ledger %s: cannot map it: %s",
                           gpumem__quote(l->path, q, sizeof q), strerror(err));
        goto fail;
    }
    l->hdr = map;
    if (!p->read_only && (s = claim(l, why)) != GPUMEM_OK)
        goto fail;
    *out = l;
    return GPUMEM_OK;
fail:
    gpumem__ledger_close(l);
    return s;
}

static void stop_helper(struct ledger *l)
{
    atomic_store(&l->stop, true);
    /* the thread may be between its check of `stop` and its wait: wake until it
     * says it has left (waking other processes' threads is harmless: they see
     * no new request and wait again) */
    while (!atomic_load(&l->helper_done)) {
        futex_wake_all(&l->hdr->request_seq);
        sleep_us(1000);
    }
    pthread_join(l->helper, NULL);
}

void gpumem__ledger_close(struct ledger *l)
{
    if (!l)
        return;
    if (inherited(l)) {
        /* the fd was closed at the fork and the mapping never came (MADV_DONTFORK:
         * whatever this process mapped at its address since is not the ledger);
         * the slot and its thread are the parent's, and admit_lock may have been
         * copied held, so it is left alone */
        free(l->copy);
        free(l);
        return;
    }
    if (l->helper_started)
        stop_helper(l);
    /* a file truncated meanwhile is left as it is rather than faulted on */
    if (l->slot >= 0 && check_size(l, NULL) == GPUMEM_OK) {
        struct ledger_slot *me = slot_at(l, (unsigned)l->slot);
        atomic_fetch_add(&me->claim_seq, 1);
        slot_reset(me);
        atomic_fetch_add(&me->claim_seq, 1);
    }
    if (l->copy)
        free(l->copy);
    else if (l->hdr != MAP_FAILED)
        munmap(l->hdr, l->map_size);
    if (l->fd >= 0)
        registry_close(l->fd); /* drops the slot's lock */
    gpumem__mutex_destroy(&l->admit_lock);
    free(l);
}

const char *gpumem__ledger_path(const struct ledger *l) { return l->path; }
int gpumem__ledger_slot(const struct ledger *l) { return l->slot; }
uint64_t gpumem__ledger_total_bytes(const struct ledger *l) { return l->total_bytes; }
unsigned gpumem__ledger_slot_count(const struct ledger *l) { return l->slot_count; }

/* --------------------------------------------------- the owner's figures -- */

/* Whether this process may write l's slot: it owns one, in this generation. */
static bool owner(const struct ledger *l) { return l->slot >= 0 && !inherited(l); }

static gpumem_status refuse(const struct ledger *l, const char *what, struct reason *why)
{
    char q[GPUMEM_QUOTE_BUF];
    if (inherited(l))
        return gpumem__reason(why, GPUMEM_ERR_UNSUPPORTED,
                              "ledger %s: %s: this process (pid %ld) inherited it across "
                              "fork(); its slot is the parent's",
                              gpumem__quote(l->path, q, sizeof q), what,
                              gpumem__process_id());
    return gpumem__reason(why, GPUMEM_ERR_UNSUPPORTED, "ledger %s: %s: opened read-only",
                          gpumem__quote(l->path, q, sizeof q), what);
}

/* Raises the slot's device count to cover dev: a CAS loop, since two threads of
 * the owner may publish two devices at once. */
static void note_device(struct ledger_slot *me, unsigned dev)
{
    uint32_t n = atomic_load_explicit(&me->num_devices, memory_order_relaxed);
    while (n < dev + 1 &&
           !atomic_compare_exchange_weak_explicit(&me->num_devices, &n, dev + 1,
                                                  memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
}

gpumem_status gpumem__ledger_set_device(struct ledger *l, unsigned dev,
                                        enum ledger_policy policy, uint64_t limit)
{
    if (!owner(l))
        return refuse(l, "set_device", NULL);
    if (dev >= GPUMEM_LEDGER_DEVICES)
        return GPUMEM_ERR_INVALID_ARGUMENT;
    struct ledger_slot *me = slot_at(l, (unsigned)l->slot);
    atomic_store_explicit(&me->dev[dev].policy, (uint32_t)policy, memory_order_relaxed);
    atomic_store_explicit(&me->dev[dev].limit, limit, memory_order_relaxed);
    note_device(me, dev);
    return GPUMEM_OK;
}

void gpumem__ledger_unadmit(struct ledger *l, unsigned dev, uint64_t bytes)
{
    if (!owner(l) || dev >= GPUMEM_LEDGER_DEVICES)
        return;
    _Atomic uint64_t *a = &slot_at(l, (unsigned)l->slot)->dev[dev].admitted;
    /* only this process writes it, but two of its threads may: a CAS loop keeps
     * both subtractions and stops at 0 */
    uint64_t old = atomic_load(a);
    while (!atomic_compare_exchange_weak(a, &old, gpumem__sat_sub_u64(old, bytes))) {
    }
}

_Atomic uint64_t *gpumem__ledger_taking(struct ledger *l)
{
    return owner(l) ? &slot_at(l, (unsigned)l->slot)->taking : NULL;
}

void gpumem__ledger_set_usage(struct ledger *l, unsigned dev, uint64_t in_use,
                              uint64_t reserved, uint64_t peak)
{
    if (!owner(l) || dev >= GPUMEM_LEDGER_DEVICES)
        return;
    struct ledger_slot *me = slot_at(l, (unsigned)l->slot);
    atomic_store_explicit(&me->dev[dev].usage.in_use, in_use, memory_order_relaxed);
    atomic_store_explicit(&me->dev[dev].usage.reserved, reserved, memory_order_relaxed);
    atomic_store_explicit(&me->dev[dev].usage.peak, peak, memory_order_relaxed);
    note_device(me, dev);
}

gpumem_status gpumem__ledger_set_name(struct ledger *l, unsigned dev, const char *name)
{
    if (!owner(l))
        return refuse(l, "set_name", NULL);
    if (dev >= GPUMEM_LEDGER_DEVICES)
        return GPUMEM_ERR_INVALID_ARGUMENT;
    uint64_t words[GPUMEM_LEDGER_NAME_LEN / 8] = {0};
    size_t n = strlen(name);
    memcpy(words, name, n < GPUMEM_LEDGER_NAME_LEN - 1 ? n : GPUMEM_LEDGER_NAME_LEN - 1);
    struct ledger_slot *me = slot_at(l, (unsigned)l->slot);
    for (unsigned w = 0; w < GPUMEM_LEDGER_NAME_LEN / 8; w++)
        atomic_store_explicit(&me->dev[dev].name[w], words[w], memory_order_relaxed);
    note_device(me, dev);
    return GPUMEM_OK;
}

struct ledger_usage *gpumem__ledger_usage(struct ledger *l, unsigned dev)
{
    if (!owner(l) || dev >= GPUMEM_LEDGER_DEVICES)
        return NULL;
    struct ledger_slot *me = slot_at(l, (unsigned)l->slot);
    note_device(me, dev);
    return &me->dev[dev].usage;
}

/* ---------------------------------------------------------- admission -- */

/* What a slot holds of the GPU: per device the larger of admitted and reserved
 * (*pending: admitted and not yet taken from the driver). Saturating: a hostile
 * file's figures can refuse admissions, not wrap them into passing. */
static uint64_t slot_held(const struct ledger_slot *s, uint64_t *pending)
{
    uint64_t held = 0, wait = 0;
    uint32_t n = atomic_load_explicit(&s->num_devices, memory_order_relaxed);
    if (n > GPUMEM_LEDGER_DEVICES)
        n = GPUMEM_LEDGER_DEVICES;
    for (uint32_t d = 0; d < n; d++) {
        uint64_t a = atomic_load_explicit(&s->dev[d].admitted, memory_order_relaxed);
        uint64_t r =
            atomic_load_explicit(&s->dev[d].usage.reserved, memory_order_relaxed);
        held = gpumem__sat_add_u64(held, gpumem__max_u64(a, r));
        wait = gpumem__sat_add_u64(wait, gpumem__sat_sub_u64(a, r));
    }
    if (pending)
        *pending = wait;
    return held;
}

struct holder {
    int64_t pid;
    char comm[GPUMEM_LEDGER_COMM_LEN];
    uint64_t held;
};

static void read_comm(const struct ledger_slot *s, char out[GPUMEM_LEDGER_COMM_LEN])
{
    uint64_t words[2] = {atomic_load(&s->comm[0]), atomic_load(&s->comm[1])};
    memcpy(out, words, GPUMEM_LEDGER_COMM_LEN);
    out[GPUMEM_LEDGER_COMM_LEN - 1] = '\0';
}

/* Keeps the three largest holders, largest first, for the refusal's reason. */
static void note_holder(struct holder top[3], const struct ledger_slot *s, uint64_t held)
{
    if (held == 0 || held <= top[2].held)
        return;
    int at = 2;
    while (at > 0 && top[at - 1].held < held) {
        top[at] = top[at - 1];
        at--;
    }
    top[at].pid = atomic_load(&s->pid);
    top[at].held = held;
    read_comm(s, top[at].comm);
}

/* Releases a dead slot's lock after zeroing it, so that a display shows it free.
 * pre: the admission lock held (no claimer can be taking it meanwhile). */
static void reclaim(struct ledger *l, unsigned i)
{
    if (ofd_lock(l->fd, F_OFD_SETLK, F_WRLCK, slot_offset(i), NULL) != 0)
        return;
    struct ledger_slot *s = slot_at(l, i);
    atomic_fetch_add(&s->claim_seq, 1);
    slot_reset(s);
    atomic_fetch_add(&s->claim_seq, 1);
    ofd_lock(l->fd, F_OFD_SETLK, F_UNLCK, slot_offset(i), NULL);
}

static const char *describe_holders(const struct holder top[3], unsigned others,
                                    char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < 3 && top[i].held; i++) {
        char b[GPUMEM_BYTES_BUF], q[GPUMEM_QUOTE_BUF];
        int n = snprintf(buf + at, size - at, "%spid %lld %s %s", i ? ", " : " (",
                         (long long)top[i].pid, gpumem__quote(top[i].comm, q, sizeof q),
                         gpumem__format_bytes(top[i].held, b, sizeof b));
        if (n < 0 || (size_t)n >= size - at)
            break;
        at += (size_t)n;
    }
    if (at > 0 && at + 8 < size)
        snprintf(buf + at, size - at, "%s)", others > 3 ? ", ..." : "");
    return buf;
}

/* What the other live slots hold, summed under the admission lock; dead slots
 * met on the way are reclaimed. */
struct others {
    uint64_t held;    /* per device the larger of admitted and reserved */
    uint64_t pending; /* of it, admitted and not yet taken from the driver */
    uint64_t taking;  /* of that, being taken from the driver right now */
    unsigned holders; /* slots that hold anything */
    struct holder top[3];
};

/* pre: the admission lock held. */
static void sum_others(struct ledger *l, struct others *o)
{
    memset(o, 0, sizeof *o);
    for (unsigned i = 0; i < l->slot_count; i++) {
        struct ledger_slot *s = slot_at(l, i);
        if ((int)i == l->slot || atomic_load(&s->state) == SLOT_FREE)
            continue;
        if (!slot_alive(l, i)) {
            reclaim(l, i);
            continue;
        }
        uint64_t pending;
        uint64_t held = slot_held(s, &pending);
        o->held = gpumem__sat_add_u64(o->held, held);
        o->pending = gpumem__sat_add_u64(o->pending, pending);
        o->taking = gpumem__sat_add_u64(o->taking, atomic_load(&s->taking));
        o->holders += held > 0;
        note_holder(o->top, s, held);
    }
}

/* Takes the process-local and the file's admission locks; pre: owner(l). */
static gpumem_status admission_begin(struct ledger *l, struct reason *why)
{
    gpumem_status s = check_size(l, why);
    if (s != GPUMEM_OK)
        return s;
    gpumem__mutex_lock(&l->admit_lock);
    if ((s = admission_lock(l, why)) != GPUMEM_OK)
        gpumem__mutex_unlock(&l->admit_lock);
    return s;
}

static void admission_end(struct ledger *l)
{
    admission_unlock(l);
    gpumem__mutex_unlock(&l->admit_lock);
}

/* Before a plan or an admission that reads the driver's free memory: bytes that
 * other processes are taking from the driver right now (others.taking) may be
 * gone from the driver's free memory already and still count as admitted and
 * not taken, twice, which would plan less than they leave. So wait for them to
 * be published as reserved, a millisecond at a time with the admission lock
 * let go, LEDGER_TAKE_WAIT_MS at most (then plan as before, conservatively),
 * and sum the others again. A take is one driver allocation: a process that
 * dies in one is reclaimed by sum_others. pre: the admission lock held; on
 * failure it is not (the status of taking it again). */
static gpumem_status settle_takes(struct ledger *l, struct others *o, struct reason *why)
{
    uint64_t start = now_ms();
    while (o->taking && now_ms() - start < LEDGER_TAKE_WAIT_MS) {
        admission_end(l);
        sleep_us(1000);
        gpumem_status s = admission_begin(l, why);
        if (s != GPUMEM_OK)
            return s;
        sum_others(l, o);
    }
    return GPUMEM_OK;
}

/* What admitting `bytes` more for device v adds to this process's holding: the
 * bytes it will take from the driver beyond what it reserved already. */
static uint64_t need_of(const struct ledger_dev *v, uint64_t bytes)
{
    uint64_t admitted = atomic_load(&v->admitted);
    uint64_t reserved = atomic_load(&v->usage.reserved);
    return gpumem__sat_sub_u64(gpumem__max_u64(gpumem__sat_add_u64(admitted, bytes),
                                               reserved),
                               gpumem__max_u64(admitted, reserved));
}

gpumem_status gpumem__ledger_admit(struct ledger *l, unsigned dev, uint64_t bytes,
                                   const struct ledger_free_query *free_query,
                                   struct reason *why)
{
    if (!owner(l))
        return refuse(l, "admission", why);
    if (dev >= GPUMEM_LEDGER_DEVICES)
        return gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT,
                              "ledger: logical device %u is not below %d", dev,
                              GPUMEM_LEDGER_DEVICES);
    gpumem_status s = admission_begin(l, why);
    if (s != GPUMEM_OK)
        return s;
    char q[GPUMEM_QUOTE_BUF], b1[GPUMEM_BYTES_BUF], b2[GPUMEM_BYTES_BUF],
        b3[GPUMEM_BYTES_BUF], list[200];
    struct others o;
    sum_others(l, &o);
    if (free_query && free_query->query && (s = settle_takes(l, &o, why)) != GPUMEM_OK)
        return s;
    struct ledger_slot *me = slot_at(l, (unsigned)l->slot);
    struct ledger_dev *v = &me->dev[dev];
    uint64_t my_pending;
    uint64_t mine = slot_held(me, &my_pending);
    uint64_t need = need_of(v, bytes);
    if (dev >= atomic_load(&me->num_devices))
        mine =
            gpumem__sat_add_u64(mine, gpumem__max_u64(atomic_load(&v->admitted),
                                                      atomic_load(&v->usage.reserved)));
    uint64_t after = gpumem__sat_add_u64(gpumem__sat_add_u64(mine, need), o.held);
    if (after > l->total_bytes) {
        s = gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                           "ledger %s: %s asked, %s of the GPU's %s held by %u other "
                           "process%s%s",
                           gpumem__quote(l->path, q, sizeof q),
                           gpumem__format_bytes(bytes, b1, sizeof b1),
                           gpumem__format_bytes(o.held, b2, sizeof b2),
                           gpumem__format_bytes(l->total_bytes, b3, sizeof b3), o.holders,
                           o.holders == 1 ? "" : "es",
                           describe_holders(o.top, o.holders, list, sizeof list));
        goto out;
    }
    if (free_query && free_query->query && need > 0) {
        uint64_t free_bytes = 0;
        if ((s = free_query->query(free_query->ctx, &free_bytes, why)) != GPUMEM_OK)
            goto out;
        uint64_t promised = gpumem__sat_add_u64(o.pending, my_pending);
        if (gpumem__sat_add_u64(need, promised) > free_bytes) {
            s = gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                               "ledger %s: %s asked, the driver has %s free of which %s "
                               "are admitted and not yet taken%s",
                               gpumem__quote(l->path, q, sizeof q),
                               gpumem__format_bytes(bytes, b1, sizeof b1),
                               gpumem__format_bytes(free_bytes, b2, sizeof b2),
                               gpumem__format_bytes(promised, b3, sizeof b3),
                               describe_holders(o.top, o.holders, list, sizeof list));
            goto out;
        }
    }
    atomic_store(&v->admitted, gpumem__sat_add_u64(atomic_load(&v->admitted), bytes));
    note_device(me, dev);
out:
    admission_end(l);
    return s;
}

gpumem_status gpumem__ledger_admit_planned(struct ledger *l, unsigned n,
                                           const struct ledger_free_query *free_query,
                                           ledger_plan_fn plan, void *ctx, uint64_t *want,
                                           struct reason *why)
{
    if (!owner(l))
        return refuse(l, "admission", why);
    if (n == 0 || n > GPUMEM_LEDGER_DEVICES)
        return gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT,
                              "ledger: %u logical devices, not within 1..%d", n,
                              GPUMEM_LEDGER_DEVICES);
    gpumem_status s = admission_begin(l, why);
    if (s != GPUMEM_OK)
        return s;
    char q[GPUMEM_QUOTE_BUF], b1[GPUMEM_BYTES_BUF], b2[GPUMEM_BYTES_BUF], list[200];
    struct others o;
    sum_others(l, &o);
    if (free_query && free_query->query && (s = settle_takes(l, &o, why)) != GPUMEM_OK)
        return s;
    struct ledger_slot *me = slot_at(l, (unsigned)l->slot);
    note_device(me, n - 1); /* so that slot_held counts the n devices */
    uint64_t my_pending;
    uint64_t mine = slot_held(me, &my_pending);
    /* exactly what gpumem__ledger_admit's two checks leave */
    uint64_t room =
        gpumem__sat_sub_u64(l->total_bytes, gpumem__sat_add_u64(o.held, mine));
    if (free_query && free_query->query) {
        uint64_t free_bytes = 0;
        if ((s = free_query->query(free_query->ctx, &free_bytes, why)) != GPUMEM_OK)
            goto out;
        room =
            gpumem__min_u64(room, gpumem__sat_sub_u64(free_bytes,
                                                      gpumem__sat_add_u64(o.pending,
                                                                          my_pending)));
    }
    plan(ctx, room, want);
    uint64_t need = 0, asked = 0;
    for (unsigned d = 0; d < n; d++) {
        need = gpumem__sat_add_u64(need, need_of(&me->dev[d], want[d]));
        asked = gpumem__sat_add_u64(asked, want[d]);
    }
    if (need > room) {
        s = gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                           "ledger %s: %s asked, %s may be admitted now%s",
                           gpumem__quote(l->path, q, sizeof q),
                           gpumem__format_bytes(asked, b1, sizeof b1),
                           gpumem__format_bytes(room, b2, sizeof b2),
                           describe_holders(o.top, o.holders, list, sizeof list));
        goto out;
    }
    for (unsigned d = 0; d < n; d++)
        atomic_store(&me->dev[d].admitted,
                     gpumem__sat_add_u64(atomic_load(&me->dev[d].admitted), want[d]));
out:
    admission_end(l);
    return s;
}

/* ---------------------------------------------------------- give-back -- */

/* Records that this process answered every request up to `seq`, never going
 * back (two threads may answer: the give-back thread, and a requester answering
 * for it, gpumem__ledger_request_answering), and wakes the requesters. False
 * when it had answered them already. */
static bool answer_up_to(struct ledger *l, uint32_t seq)
{
    struct ledger_slot *me = slot_at(l, (unsigned)l->slot);
    uint32_t old = atomic_load(&me->ack_seq);
    do {
        /* serial-number order: wraps of the 32-bit sequence are harmless */
        if ((int32_t)(seq - old) <= 0)
            return false;
    } while (!atomic_compare_exchange_weak(&me->ack_seq, &old, seq));
    atomic_fetch_add(&l->hdr->ack_word, 1);
    futex_wake_all(&l->hdr->ack_word);
    return true;
}

static void *helper_main(void *arg)
{
    struct ledger *l = arg;
    struct ledger_header *h = l->hdr;
    struct ledger_slot *me = slot_at(l, (unsigned)l->slot);
    uint32_t seen = atomic_load(&me->ack_seq);
    while (!atomic_load(&l->stop)) {
        uint32_t now = atomic_load(&h->request_seq);
        if (now == seen) {
            int err = futex_wait(&h->request_seq, seen, 0);
            /* EFAULT and the like: the mapping is gone bad; stop answering
             * without touching it again */
            if (err && err != EAGAIN && err != EINTR && err != ETIMEDOUT)
                break;
            continue;
        }
        seen = now;
        uint32_t from = atomic_load(&h->request_slot);
        uint64_t bytes = atomic_load(&h->request_bytes);
        /* no lock is held here: the callback may take the runtime's */
        if (from != (uint32_t)l->slot + 1)
            l->give_fn(l->give_ctx, bytes);
        answer_up_to(l, seen);
    }
    atomic_store(&me->gives, 0);
    atomic_store(&l->helper_done, true);
    return NULL;
}

gpumem_status gpumem__ledger_give(struct ledger *l, ledger_give_fn fn, void *ctx,
                                  struct reason *why)
{
    if (!owner(l))
        return refuse(l, "give-back", why);
    if (l->helper_started)
        return gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT,
                              "ledger: its give-back thread runs already");
    l->give_fn = fn;
    l->give_ctx = ctx;
    struct ledger_slot *me = slot_at(l, (unsigned)l->slot);
    /* answers only requests posted from now on */
    atomic_store(&me->ack_seq, atomic_load(&l->hdr->request_seq));
    atomic_store(&me->gives, 1);
    int err = pthread_create(&l->helper, NULL, helper_main, l);
    if (err != 0) {
        atomic_store(&me->gives, 0);
        char q[GPUMEM_QUOTE_BUF];
        return gpumem__reason(why, GPUMEM_ERR_BACKEND,
                              "ledger %s: cannot start its give-back thread: %s",
                              gpumem__quote(l->path, q, sizeof q), strerror(err));
    }
    l->helper_started = true;
    return GPUMEM_OK;
}

/* Live givers other than this process that have not answered request `seq`. */
static unsigned count_unanswered(struct ledger *l, uint32_t seq, unsigned *givers)
{
    unsigned waiting = 0;
    *givers = 0;
    for (unsigned i = 0; i < l->slot_count; i++) {
        struct ledger_slot *o = slot_at(l, i);
        if ((int)i == l->slot || atomic_load(&o->state) != SLOT_LIVE ||
            atomic_load(&o->gives) != 1 || !slot_alive(l, i))
            continue;
        (*givers)++;
        /* serial-number order: wraps of the 32-bit sequence are harmless */
        if ((int32_t)(atomic_load(&o->ack_seq) - seq) < 0)
            waiting++;
    }
    return waiting;
}

static gpumem_status request(struct ledger *l, uint64_t bytes, unsigned wait_ms,
                             bool answering, struct ledger_request_result *out,
                             struct reason *why)
{
    memset(out, 0, sizeof *out);
    if (!owner(l))
        return refuse(l, "give-back request", why);
    gpumem_status s = check_size(l, why);
    if (s != GPUMEM_OK)
        return s;
    struct ledger_header *h = l->hdr;
    uint64_t start = now_ms(), deadline = start + wait_ms;
    atomic_store(&h->request_bytes, bytes);
    atomic_store(&h->request_slot, (uint32_t)l->slot + 1);
    uint32_t seq = atomic_fetch_add(&h->request_seq, 1) + 1;
    futex_wake_all(&h->request_seq);
    /* and the requesters: one that answers for its process sees the request at
     * once (the others count again and wait on) */
    futex_wake_all(&h->ack_word);
    for (;;) {
        uint32_t acks = atomic_load(&h->ack_word);
        if (answering)
            answer_up_to(l, atomic_load(&h->request_seq));
        unsigned givers;
        unsigned waiting = count_unanswered(l, seq, &givers);
        uint64_t now = now_ms();
        out->givers = givers;
        out->answered = givers - waiting;
        out->waited_ms = now - start;
        if (waiting == 0) {
            out->complete = true;
            break;
        }
        if (now >= deadline)
            break;
        /* in slices, so that a giver that died is noticed soon */
        unsigned slice = (unsigned)gpumem__min_u64(deadline - now, LEDGER_SLICE_MS);
        futex_wait(&h->ack_word, acks, slice);
    }
    return GPUMEM_OK;
}

gpumem_status gpumem__ledger_request(struct ledger *l, uint64_t bytes, unsigned wait_ms,
                                     struct ledger_request_result *out,
                                     struct reason *why)
{
    return request(l, bytes, wait_ms, false, out, why);
}

gpumem_status gpumem__ledger_request_answering(struct ledger *l, uint64_t bytes,
                                               unsigned wait_ms,
                                               struct ledger_request_result *out,
                                               struct reason *why)
{
    return request(l, bytes, wait_ms, true, out, why);
}

/* ---------------------------------------------------------------- read -- */

/* Copies live slot i into *e: its identity between two equal, even claim
 * sequences, so never half one owner's and half another's (a reader copies the
 * slot from the file with pread first, and compares with the file's sequence
 * after). False when it is free, dead, or kept being claimed. */
/* A reader's copy of slot i, read anew from the file; false when the file is
 * shorter now. Nothing to do for a mapping. */
static bool copy_slot(struct ledger *l, unsigned i)
{
    if (!l->copy)
        return true;
    ssize_t n = pread(l->fd, slot_at(l, i), sizeof(struct ledger_slot), slot_offset(i));
    return n == (ssize_t)sizeof(struct ledger_slot);
}

/* Slot i's claim sequence as it is now: in the file, for a reader (1, odd, when
 * it cannot be read: a claim in progress, tried again). */
static uint32_t claim_seq_now(const struct ledger *l, unsigned i)
{
    if (!l->copy)
        return atomic_load(&slot_at(l, i)->claim_seq);
    uint32_t v;
    return pread(l->fd, &v, sizeof v, slot_offset(i)) == (ssize_t)sizeof v ? v : 1u;
}

static bool read_slot(struct ledger *l, unsigned i, struct ledger_entry *e)
{
    struct ledger_slot *s = slot_at(l, i);
    for (int attempt = 0; attempt < 100; attempt++) {
        if (!copy_slot(l, i))
            return false;
        uint32_t before = atomic_load(&s->claim_seq);
        if (before & 1u) {
            sleep_us(100);
            continue;
        }
        if (atomic_load(&s->state) != SLOT_LIVE || !slot_alive(l, i))
            return false;
        memset(e, 0, sizeof *e);
        e->slot = i;
        e->self = (int)i == l->slot;
        e->pid = atomic_load(&s->pid);
        e->start_time = atomic_load(&s->start_time);
        e->uid = atomic_load(&s->uid);
        read_comm(s, e->comm);
        e->gives = atomic_load(&s->gives) == 1;
        uint32_t n = atomic_load(&s->num_devices);
        e->num_devices = n > GPUMEM_LEDGER_DEVICES ? GPUMEM_LEDGER_DEVICES : n;
        for (unsigned d = 0; d < e->num_devices; d++) {
            const struct ledger_dev *v = &s->dev[d];
            struct ledger_device_figures *f = &e->dev[d];
            f->policy = atomic_load_explicit(&v->policy, memory_order_relaxed);
            f->limit = atomic_load_explicit(&v->limit, memory_order_relaxed);
            f->admitted = atomic_load_explicit(&v->admitted, memory_order_relaxed);
            f->reserved = atomic_load_explicit(&v->usage.reserved, memory_order_relaxed);
            f->in_use = atomic_load_explicit(&v->usage.in_use, memory_order_relaxed);
            f->peak = atomic_load_explicit(&v->usage.peak, memory_order_relaxed);
            uint64_t words[GPUMEM_LEDGER_NAME_LEN / 8];
            for (unsigned w = 0; w < GPUMEM_LEDGER_NAME_LEN / 8; w++)
                words[w] = atomic_load_explicit(&v->name[w], memory_order_relaxed);
            memcpy(f->name, words, sizeof f->name);
            f->name[sizeof f->name - 1] = '\0'; /* a writer may have left none */
            e->held =
                gpumem__sat_add_u64(e->held, gpumem__max_u64(f->admitted, f->reserved));
        }
        if (claim_seq_now(l, i) == before)
            return true;
    }
    return false;
}

gpumem_status gpumem__ledger_read(struct ledger *l, struct ledger_entry *out,
                                  size_t capacity, size_t *count, struct reason *why)
{
    *count = 0;
    if (inherited(l))
        return refuse(l, "read", why);
    gpumem_status s = check_size(l, why);
    if (s != GPUMEM_OK)
        return s;
    struct ledger_entry e;
    size_t n = 0;
    for (unsigned i = 0; i < l->slot_count; i++) {
        if (!read_slot(l, i, &e))
            continue;
        if (out && n < capacity)
            out[n] = e;
        n++;
    }
    *count = n;
    return GPUMEM_OK;
}
