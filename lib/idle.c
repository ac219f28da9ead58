/* The idle release (idle.h says what and which locks). */
#include "idle.h"

#include "streams.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct watched {
    struct pool *pool;
    uint64_t activity; /* its count at the last look that saw it change */
    uint64_t since_ms; /* when that look was */
    bool released;     /* released since: not again until it is used */
    unsigned retries;  /* looks since the release while streams held memory */
};

/* Looks after a release that try again while the pool's streams still hold
 * memory (their work still ran): a stream's memory goes back once its work is
 * done, without a call of the program's, for four periods; a stream destroyed
 * too early (streams.h) is not tried for ever. */
#define IDLE_STREAM_RETRIES 16

struct idle {
    const struct options *opts;
    uint32_t period_ms;
    gpumem_mutex lock;
    gpumem_cond wake; /* gpumem__idle_stop's signal, and the thread's start */
    bool stop;        /* under lock */
    bool started;     /* under lock: the thread waits (gpumem__idle_start) */
    pthread_t thread;
    size_t n;
    struct watched pools[]; /* the growing ones */
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* One look at every pool: the idle ones are released. Holds no lock. */
static void look(struct idle *idle)
{
    /* During a CUDA graph capture another thread's mapping calls may break it
     * (CUDA's global capture mode): the pools wait for the next look after it. */
    if (gpumem__streams_capturing())
        return;
    uint64_t now = now_ms();
    for (size_t i = 0; i < idle->n; i++) {
        struct watched *w = &idle->pools[i];
        uint64_t a = gpumem__pool_activity(w->pool);
        if (a != w->activity) {
            w->activity = a;
            w->since_ms = now;
            w->released = false;
            w->retries = 0;
            continue;
        }
        if (w->released || now - w->since_ms < idle->period_ms)
            continue;
        uint64_t released;
        bool streams_hold = false;
        struct reason why;
        if (gpumem__pool_release_idle(w->pool, &released, &streams_hold, &why) !=
            GPUMEM_OK)
            gpumem__log(idle->opts, GPUMEM_LOG_WARNING,
                        "gpumem: giving an idle pool's memory back: %s", why.text);
        w->released = !streams_hold || ++w->retries > IDLE_STREAM_RETRIES;
        /* the release itself changes no count: the pool stays idle */
        w->activity = gpumem__pool_activity(w->pool);
    }
}

static void *idle_main(void *arg)
{
    struct idle *idle = arg;
    uint64_t tick = idle->period_ms / 4 ? idle->period_ms / 4 : 1;
    gpumem__mutex_lock(&idle->lock);
    idle->started = true;
    gpumem__cond_broadcast(&idle->wake);
    while (!idle->stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        uint64_t ns = (uint64_t)until.tv_nsec + tick % 1000 * 1000000;
        until.tv_sec += (time_t)(tick / 1000 + ns / 1000000000);
        until.tv_nsec = (long)(ns % 1000000000);
        int err = 0;
        while (!idle->stop && err != ETIMEDOUT)
            err = gpumem__cond_wait(&idle->wake, &idle->lock, &until);
        if (idle->stop)
            break;
        gpumem__mutex_unlock(&idle->lock);
        look(idle);
        gpumem__mutex_lock(&idle->lock);
    }
    gpumem__mutex_unlock(&idle->lock);
    return NULL;
}

void gpumem__idle_start(const struct options *opts, struct pool *const *pools, size_t n,
                        struct idle **out)
{
    *out = NULL;
    size_t growing = 0;
    for (size_t i = 0; i < n; i++)
        growing += pools[i] && gpumem__pool_grows(pools[i]);
    if (!opts->growth_idle_release_ms || !growing)
        return;
    struct idle *idle = calloc(1, sizeof *idle + growing * sizeof idle->pools[0]);
    int err = idle ? gpumem__cond_init(&idle->wake) : ENOMEM;
    if (err) {
        free(idle);
        gpumem__log(opts, GPUMEM_LOG_WARNING,
                    "gpumem: idle pools will keep their memory: %s", strerror(err));
        return;
    }
    idle->opts = opts;
    idle->period_ms = opts->growth_idle_release_ms;
    gpumem__mutex_init(&idle->lock, GPUMEM_RANK_IDLE);
    uint64_t now = now_ms();
    for (size_t i = 0; i < n; i++)
        if (pools[i] && gpumem__pool_grows(pools[i]))
            idle->pools[idle->n++] =
                (struct watched){pools[i], gpumem__pool_activity(pools[i]), now, false,
                                 0};
    if ((err = pthread_create(&idle->thread, NULL, idle_main, idle)) != 0) {
        gpumem__log(opts, GPUMEM_LOG_WARNING,
                    "gpumem: idle pools will keep their memory: cannot start the idle "
                    "release's thread: %s",
                    strerror(err));
        gpumem__cond_destroy(&idle->wake);
        gpumem__mutex_destroy(&idle->lock);
        free(idle);
        return;
    }
    /* Initialization returns with the thread parked in its wait, not in its
     * start-up (where a sanitizer's runtime allocates): a program that forks
     * right after initializing forks a quiet thread. */
    gpumem__mutex_lock(&idle->lock);
    while (!idle->started)
        gpumem__cond_wait(&idle->wake, &idle->lock, NULL);
    gpumem__mutex_unlock(&idle->lock);
    *out = idle;
}

void gpumem__idle_stop(struct idle *idle)
{
    if (!idle)
        return;
    gpumem__mutex_lock(&idle->lock);
    idle->stop = true;
    gpumem__cond_broadcast(&idle->wake);
    gpumem__mutex_unlock(&idle->lock);
    pthread_join(idle->thread, NULL);
    gpumem__cond_destroy(&idle->wake);
    gpumem__mutex_destroy(&idle->lock);
    free(idle);
}

void gpumem__idle_forget(struct idle *idle)
{
    /* held at the fork: a parent's look was under way; leave the copy as it is */
    if (!idle || !gpumem__mutex_trylock(&idle->lock))
        return;
    gpumem__mutex_unlock(&idle->lock); /* no other thread here: it only lets go */
    free(idle); /* the condition variable with it, not destroyed (a waiter's copy) */
}
