/* The fork generation (fork.h): a counter that a fork handler makes one larger in
 * each forked child, before fork() returns there. Lock-free: the child handler
 * runs on the child's only thread, and everyone else only reads the counter. */
#include "fork.h"

static _Atomic unsigned fork_generation;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* In the child, on its only thread, before fork() returns there. */
static void fork_child(void)
{
    unsigned g = atomic_load_explicit(&fork_generation, memory_order_relaxed) + 1;
    atomic_store_explicit(&fork_generation, g, memory_order_relaxed);
}

static void fork_watch(void) { gpumem__atfork(NULL, NULL, fork_child); }

unsigned gpumem__fork_generation(void)
{
    pthread_once(&fork_once, fork_watch);
    return atomic_load_explicit(&fork_generation, memory_order_relaxed);
}
