/* gpumem's lock and condition themselves (platform.h): one holder at a time under
 * contention, a waiter that sleeps and is woken, a trylock that never waits, and
 * a condition's wait that ends at its signal or its deadline. In every build (the
 * lock order, a debug build's check, is test_locks.c's); under ThreadSanitizer
 * too (run.sh), where a lock that lets two holders in is also a reported race. */
#include "platform.h"

#include "harness.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#define THREADS 8
#define ROUNDS  100000

struct shared {
    gpumem_mutex lock;
    unsigned long count; /* under lock: a plain read, add and write */
    int inside;          /* under lock: holders at this moment */
    int most_inside;
};

static void *add(void *arg)
{
    struct shared *s = arg;
    for (int i = 0; i < ROUNDS; i++) {
        gpumem__mutex_lock(&s->lock);
        if (++s->inside > s->most_inside)
            s->most_inside = s->inside;
        s->count++;
        s->inside--;
        gpumem__mutex_unlock(&s->lock);
    }
    return NULL;
}

TEST(one_holder_at_a_time_under_contention)
{
    struct shared s = {GPUMEM_MUTEX_INITIALIZER(GPUMEM_RANK_POOL), 0, 0, 0};
    pthread_t t[THREADS];
    int started = 0;
    for (; started < THREADS; started++)
        if (pthread_create(&t[started], NULL, add, &s) != 0)
            break;
    ASSERT_EQ(started, THREADS);
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    ASSERT_EQ(s.count, (unsigned long)started * ROUNDS);
    ASSERT_EQ(s.most_inside, 1);
    ASSERT_TRUE(gpumem__mutex_trylock(&s.lock)); /* left free */
    gpumem__mutex_unlock(&s.lock);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, ms % 1000 * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

struct waiter {
    gpumem_mutex *lock;
    _Atomic int stage; /* 1: about to take the lock; 2: has it */
};

static void *take(void *arg)
{
    struct waiter *w = arg;
    atomic_store(&w->stage, 1);
    gpumem__mutex_lock(w->lock);
    atomic_store(&w->stage, 2);
    gpumem__mutex_unlock(w->lock);
    return NULL;
}

TEST(a_waiter_sleeps_until_the_holder_lets_go)
{
    gpumem_mutex lock = GPUMEM_MUTEX_INITIALIZER(GPUMEM_RANK_POOL);
    gpumem__mutex_lock(&lock);
    ASSERT_FALSE(gpumem__mutex_try_acquire(&lock)); /* held: never waits */
    struct waiter w = {&lock, 0};
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, take, &w), 0);
    while (atomic_load(&w.stage) == 0)
        sleep_ms(1);
    sleep_ms(50); /* long enough for it to reach the wait */
    ASSERT_EQ(atomic_load(&w.stage), 1);
#if GPUMEM_FUTEX_LOCKS
    ASSERT_EQ(atomic_load(&lock.state), 2u); /* marked: the release must wake */
#endif
    gpumem__mutex_unlock(&lock);
    pthread_join(t, NULL);
    ASSERT_EQ(atomic_load(&w.stage), 2);
    ASSERT_TRUE(gpumem__mutex_trylock(&lock));
    gpumem__mutex_unlock(&lock);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static struct timespec in_ms(long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long ns = ts.tv_nsec + ms % 1000 * 1000000L;
    ts.tv_sec += ms / 1000 + ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    return ts;
}

struct signal {
    gpumem_mutex lock;
    gpumem_cond cond;
    bool ready; /* under lock */
};

static void *signal_later(void *arg)
{
    struct signal *s = arg;
    sleep_ms(50);
    gpumem__mutex_lock(&s->lock);
    s->ready = true;
    gpumem__cond_broadcast(&s->cond);
    gpumem__mutex_unlock(&s->lock);
    return NULL;
}

TEST(a_condition_ends_at_its_deadline_or_its_signal)
{
    struct signal s = {GPUMEM_MUTEX_INITIALIZER(GPUMEM_RANK_IDLE), {0}, false};
    ASSERT_EQ(gpumem__cond_init(&s.cond), 0);

    /* no signal: ETIMEDOUT, not before the deadline, the lock held again */
    gpumem__mutex_lock(&s.lock);
    uint64_t t0 = now_ms();
    struct timespec until = in_ms(60);
    int err = 0;
    while (err != ETIMEDOUT)
        err = gpumem__cond_wait(&s.cond, &s.lock, &until);
    ASSERT_TRUE(now_ms() - t0 >= 59);
    ASSERT_FALSE(gpumem__mutex_try_acquire(&s.lock));

    /* a signal from another thread ends a wait without a deadline */
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, signal_later, &s), 0);
    while (!s.ready)
        ASSERT_EQ(gpumem__cond_wait(&s.cond, &s.lock, NULL), 0);
    gpumem__mutex_unlock(&s.lock);
    pthread_join(t, NULL);

    /* a deadline already passed returns at once */
    gpumem__mutex_lock(&s.lock);
    until = in_ms(0);
    ASSERT_EQ(gpumem__cond_wait(&s.cond, &s.lock, &until), ETIMEDOUT);
    gpumem__mutex_unlock(&s.lock);
    gpumem__cond_destroy(&s.cond);
}

int main(void)
{
    RUN(one_holder_at_a_time_under_contention);
    RUN(a_waiter_sleeps_until_the_holder_lets_go);
    RUN(a_condition_ends_at_its_deadline_or_its_signal);
    HARNESS_EXIT();
}
