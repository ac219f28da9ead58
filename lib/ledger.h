/* The per-GPU ledger that every gpumem process of a user shares (issue 23): a
 * file per physical GPU and user (mode 0600, issue 33) with a slot per process, so that
 * admissions never count the same bytes twice, dead processes are recognised by a lock
 * the kernel drops, and an idle process gives back its cache on request. Below the
 * runtime: it needs only platform.h and internal.h, so that a display tool can link it
 * alone. Protocol, layout and what it does not promise: docs/ledger.md. */
#ifndef GPUMEM_LEDGER_H
#define GPUMEM_LEDGER_H

#include "internal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GPUMEM_LEDGER_SLOTS     64   /* slots of a ledger created with slots = 0 */
#define GPUMEM_LEDGER_MAX_SLOTS 4096 /* an attacher refuses a file with more */
#define GPUMEM_LEDGER_DEVICES   GPUMEM_MAX_LOGICAL_PER_GPU /* logical devices per slot */
#define GPUMEM_LEDGER_UUID_MAX  63 /* characters of a UUID, [A-Za-z0-9_-] */
#define GPUMEM_LEDGER_COMM_LEN  16 /* /proc/self/comm, with its NUL */
#define GPUMEM_LEDGER_MAX_OPEN  64 /* ledgers open at once in one process */
#define GPUMEM_LEDGER_NAME_LEN  32 /* a logical device's name, with its NUL */

struct ledger;

/* A logical device's policy, for display. */
enum ledger_policy {
    LEDGER_POLICY_UNUSED = 0, /* no pool on this logical device */
    LEDGER_POLICY_GREEDY = 1, /* its budget taken at initialization */
    LEDGER_POLICY_GROWTH = 2, /* grows on demand, up to its limit when it has one */
};

/* A logical device's usage in the file, which its owner may write through the
 * pointer gpumem__ledger_usage gives (relaxed stores, no lock: a pool publishes
 * its counters where it counts them). */
struct ledger_usage {
    _Atomic uint64_t reserved; /* bytes taken from the driver: in use plus cached */
    _Atomic uint64_t in_use;   /* bytes in live allocations */
    _Atomic uint64_t peak;     /* peak of in_use */
};

struct ledger_params {
    const char *dir;       /* folder of the file; NULL = "/dev/shm" */
    const char *uuid;      /* the GPU's UUID, names the file; 1..63 of [A-Za-z0-9_-] */
    uint64_t total_bytes;  /* the GPU's memory (> 0): a file that says otherwise is
                              refused; ignored when read_only */
    unsigned slots;        /* slots of a file this call creates: 0 = GPUMEM_LEDGER_SLOTS,
                              else 1..GPUMEM_LEDGER_MAX_SLOTS; an existing file keeps its
                              own */
    unsigned lock_wait_ms; /* longest wait for the admission lock; 0 = 2000 */
    bool read_only;        /* for display: opens an existing file only, claims no slot
                              and writes nothing; only read, path and close are allowed;
                              never maps the file (reads copies with pread) */
    bool of_user;          /* read_only only: the ledger of user `user`, not this
                              process's effective user's */
    uint32_t user;
};

/* The file of the ledger of GPU `uuid` that belongs to user `uid`, in dir (NULL:
 * /dev/shm): "<dir>/gpumem-<uuid>.u<uid>.ledger", into out; false when it does
 * not fit in size. Each user has a ledger of each GPU, shared by that user's
 * processes (docs/ledger.md, "Who may share"). */
bool gpumem__ledger_file_name(const char *dir, const char *uuid, unsigned long uid,
                              char *out, size_t size);

/* Opens this user's ledger of GPU p->uuid in p->dir (gpumem__ledger_file_name),
 * creating it when there is none (mode 0600 whatever the umask: the user's own),
 * and claims a free or dead slot for this process, which it holds until
 * gpumem__ledger_close. A file that is not a ledger of this layout and this GPU,
 * is owned by another user or may be opened by others (any group or other
 * permission), cannot be opened, or has no free slot is refused with
 * GPUMEM_ERR_BACKEND and a reason that names the file; the caller is expected to
 * warn and go on without a ledger (docs/ledger.md, "Who may share"). Bad params:
 * GPUMEM_ERR_INVALID_ARGUMENT. Never blocks longer than p->lock_wait_ms (plus
 * the file system's own calls). pre: p, out not NULL. */
gpumem_status gpumem__ledger_open(const struct ledger_params *p, struct ledger **out,
                                  struct reason *why);

/* Gives the slot up (its figures stop counting at once), stops the give-back
 * thread and frees l. In a forked child of the process that opened l, frees this
 * process's copy only: the slot and the file stay the parent's. NULL: nothing.
 * Not thread-safe against other calls on l. */
void gpumem__ledger_close(struct ledger *l);

/* The file's path, for messages. */
const char *gpumem__ledger_path(const struct ledger *l);
/* This process's slot (0-based); -1 when read-only. */
int gpumem__ledger_slot(const struct ledger *l);

/* Sets the display figures of logical device `dev` (< GPUMEM_LEDGER_DEVICES):
 * its policy and its limit (0 = none). Owner only; takes no lock. */
gpumem_status gpumem__ledger_set_device(struct ledger *l, unsigned dev,
                                        enum ledger_policy policy, uint64_t limit);

/* Sets the display name of logical device `dev` ("/device:GPU:0"; longer ones
 * are cut to GPUMEM_LEDGER_NAME_LEN - 1 bytes). Owner only; takes no lock. */
gpumem_status gpumem__ledger_set_name(struct ledger *l, unsigned dev, const char *name);

/* The usage figures of `dev` in this process's slot, for the owner to store
 * into directly (relaxed, no lock) for as long as l is open, as
 * gpumem__ledger_set_usage would; NULL in a forked child, read-only, or for a
 * `dev` out of range. The pointer is into the mapping: it must not be used
 * after gpumem__ledger_close, nor in a forked child (the mapping is not
 * inherited). */
struct ledger_usage *gpumem__ledger_usage(struct ledger *l, unsigned dev);

/* This process's figure of the bytes it is taking from the driver right now
 * (admitted, not yet published as reserved): a pool adds them before its
 * driver call and takes them off once they are published (relaxed atomics, no
 * lock), and another process's plan waits for it to come back to 0 before it
 * reads the driver's free memory (ledger.c, settle_takes). NULL without a slot. */
_Atomic uint64_t *gpumem__ledger_taking(struct ledger *l);

/* The driver's free memory, read by gpumem__ledger_admit under the admission lock
 * so that no other process takes memory between the reading and the decision. */
struct ledger_free_query {
    gpumem_status (*query)(void *ctx, uint64_t *free_bytes, struct reason *why);
    void *ctx;
};

/* Admission: in one step under the ledger-wide admission lock, adds `bytes` to
 * what logical device `dev` of this process has admitted, if this process's
 * holding plus every other live process's still fits the GPU's total bytes and,
 * with `free_query` (may be NULL), the bytes this process will take from the
 * driver fit its free memory less what others have admitted and not taken yet.
 * A process holds, per logical device, the larger of what it admitted and what
 * it reserved. Dead slots met on the way are reclaimed. Call it before taking
 * the memory from the driver, and gpumem__ledger_unadmit if the driver refuses.
 * Returns GPUMEM_OK; GPUMEM_ERR_OUT_OF_MEMORY with a reason naming the largest
 * holders; GPUMEM_ERR_BACKEND when the lock stays held past the bounded wait or
 * the file was truncated; GPUMEM_ERR_UNSUPPORTED in a forked child or read-only;
 * free_query's own status when it fails. */
gpumem_status gpumem__ledger_admit(struct ledger *l, unsigned dev, uint64_t bytes,
                                   const struct ledger_free_query *free_query,
                                   struct reason *why);

/* Decides, under the admission lock, what to admit for logical devices 0..n-1
 * of this process: want[d] bytes for device d, from `room`, what may be admitted
 * now in all. Must not call the ledger. */
typedef void (*ledger_plan_fn)(void *ctx, uint64_t room, uint64_t *want);

/* Admission of a plan made from the figures it is admitted against: in one step
 * under the admission lock, reads what gpumem__ledger_admit's two checks leave
 * for this process (the GPU's total bytes less every live process's holding and,
 * with `free_query`, the driver's free memory less every byte admitted and not
 * yet taken), calls plan(ctx, room, want), and adds want[d] to what device d
 * admitted, for each d < n (1..GPUMEM_LEDGER_DEVICES), when what they add to
 * this process's holding fits the room; else admits nothing and returns
 * GPUMEM_ERR_OUT_OF_MEMORY with the largest holders. A plan that wants no more
 * than the room it is given is never refused: a plan made from figures read
 * before the lock could be, by any admission meanwhile, and by the bytes a
 * process took from the driver and has not yet published, which count twice
 * until it does. Other statuses as gpumem__ledger_admit. */
gpumem_status gpumem__ledger_admit_planned(struct ledger *l, unsigned n,
                                           const struct ledger_free_query *free_query,
                                           ledger_plan_fn plan, void *ctx, uint64_t *want,
                                           struct reason *why);

/* Takes back up to `bytes` of what `dev` admitted (never below 0). Owner only;
 * takes no lock (less is always safe). Nothing in a forked child or read-only. */
void gpumem__ledger_unadmit(struct ledger *l, unsigned dev, uint64_t bytes);

/* Publishes the usage of `dev`, as the pool counts it: bytes in live allocations,
 * bytes taken from the driver (in use plus cached) and the peak of the first.
 * Owner only; relaxed stores, no lock. Nothing in a forked child or read-only.
 * Publish a larger `reserved` after the driver gave the memory, a smaller one
 * before giving memory back: in between the bytes then count twice (an
 * admission refused early), never zero times (two processes counting them). */
void gpumem__ledger_set_usage(struct ledger *l, unsigned dev, uint64_t in_use,
                              uint64_t reserved, uint64_t peak);

/* Called on the give-back thread, which holds no lock, when another process asks
 * for `bytes`: release cached, unused memory (never live allocations). */
typedef void (*ledger_give_fn)(void *ctx, uint64_t bytes);

/* Starts this process's give-back thread for l: it waits on the request word of
 * the file (a futex), calls fn(ctx, bytes) for each request of another process
 * and acknowledges it, even while the rest of the process calls nothing. Once
 * per ledger (a second call: GPUMEM_ERR_INVALID_ARGUMENT). Not calling it is the
 * opt-out: requesters then do not wait for this process. Fails with
 * GPUMEM_ERR_BACKEND when no thread can be created. pre: fn not NULL. */
gpumem_status gpumem__ledger_give(struct ledger *l, ledger_give_fn fn, void *ctx,
                                  struct reason *why);

struct ledger_request_result {
    unsigned givers;   /* live processes asked (those with a give-back thread) */
    unsigned answered; /* of them, those that acknowledged before the end */
    bool complete;     /* every one acknowledged (or there was none) */
    uint64_t waited_ms;
};

/* Asks every other live process that gives to give back its cached memory
 * (`bytes` is what this process lacks, a hint) and waits until all have
 * acknowledged or `wait_ms` has passed, whichever comes first. A giver that dies
 * meanwhile is no longer waited for. GPUMEM_OK either way (see out->complete);
 * GPUMEM_ERR_UNSUPPORTED in a forked child or read-only; GPUMEM_ERR_BACKEND when
 * the file was truncated. pre: out not NULL. */
gpumem_status gpumem__ledger_request(struct ledger *l, uint64_t bytes, unsigned wait_ms,
                                     struct ledger_request_result *out,
                                     struct reason *why);

/* gpumem__ledger_request, for a requester whose process's give-back thread may
 * be waiting for it (for a lock it holds while it asks, which that thread needs
 * to give): while it waits, it answers the other processes' requests in its
 * process's name, as that thread would once it could, without calling the
 * give-back callback. Two processes short at the same moment that both ask so
 * then answer each other at once, instead of each waiting out `wait_ms` for a
 * thread that waits for it. */
gpumem_status gpumem__ledger_request_answering(struct ledger *l, uint64_t bytes,
                                               unsigned wait_ms,
                                               struct ledger_request_result *out,
                                               struct reason *why);

/* One live process as the ledger shows it. */
struct ledger_device_figures {
    uint32_t policy;   /* enum ledger_policy */
    uint64_t limit;    /* 0 = none */
    uint64_t admitted; /* bytes admitted (the budget it reserved in the ledger) */
    uint64_t reserved; /* bytes taken from the driver: in use plus cached */
    uint64_t in_use;   /* bytes in live allocations */
    uint64_t peak;     /* peak of in_use */
    char name[GPUMEM_LEDGER_NAME_LEN]; /* "" when its owner set none */
};
struct ledger_entry {
    unsigned slot;
    bool self;                         /* the reading process's own slot */
    int64_t pid;                       /* for display only, never for liveness */
    uint64_t start_time;               /* clock ticks after boot (/proc/PID/stat #22) */
    uint32_t uid;                      /* its real user id */
    char comm[GPUMEM_LEDGER_COMM_LEN]; /* its command name */
    bool gives;                        /* runs a give-back thread */
    unsigned num_devices;              /* entries of dev[] in use */
    uint64_t held;                     /* sum over devices of max(admitted, reserved) */
    struct ledger_device_figures dev[GPUMEM_LEDGER_DEVICES];
};

/* Lists the live processes of the ledger (this one included), taking no lock:
 * each entry's identity is read whole (a claim in progress is retried, then
 * skipped) and each figure is one atomic read, so a figure may be a moment
 * older than another. Two-call idiom: out may be NULL to ask for *count.
 * GPUMEM_ERR_UNSUPPORTED in a forked child; GPUMEM_ERR_BACKEND when the file was
 * truncated. pre: count not NULL. */
gpumem_status gpumem__ledger_read(struct ledger *l, struct ledger_entry *out,
                                  size_t capacity, size_t *count, struct reason *why);

/* The GPU's total bytes and slot count that the file says (validated at open). */
uint64_t gpumem__ledger_total_bytes(const struct ledger *l);
unsigned gpumem__ledger_slot_count(const struct ledger *l);

#endif /* GPUMEM_LEDGER_H */
