/* Allocation tags (tag.h): the per-thread current tag and the process-wide list
 * of interned texts. The list is pushed by compare-and-swap and never shrinks, so
 * readers walk it without a lock and a tag pointer outlives every chunk that holds
 * it; a race may intern one text twice, which only costs a node. A forked child
 * inherits a list that is whole (a push is one atomic store). */
#include "tag.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct tag_node {
    struct tag_node *next;
    char text[];
};

static _Atomic(struct tag_node *) tags;
static atomic_uint tag_count;
_Thread_local const char *gpumem__tag;

/* The interned copy of text, or NULL when it is new and the table is full or
 * host memory ran out. */
static const char *tag_intern(const char *text, size_t len)
{
    struct tag_node *head = atomic_load_explicit(&tags, memory_order_acquire);
    for (struct tag_node *n = head; n; n = n->next)
        if (strcmp(n->text, text) == 0)
            return n->text;
    if (atomic_fetch_add(&tag_count, 1) >= GPUMEM_TAGS_MAX) {
        atomic_fetch_sub(&tag_count, 1);
        return NULL;
    }
    struct tag_node *node = malloc(sizeof *node + len + 1);
    if (!node) {
        atomic_fetch_sub(&tag_count, 1);
        return NULL;
    }
    memcpy(node->text, text, len + 1);
    node->next = head;
    while (!atomic_compare_exchange_weak_explicit(&tags, &node->next, node,
                                                  memory_order_release,
                                                  memory_order_acquire))
        ;
    return node->text;
}

gpumem_status gpumem_set_tag(const char *tag)
{
    static const char api[] = "gpumem_set_tag";
    if (!tag || !tag[0]) {
        gpumem__tag = NULL;
        return GPUMEM_OK;
    }
    size_t len = strlen(tag);
    if (len > GPUMEM_TAG_MAX)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s(\"%.32s...\"): the tag is %zu bytes long; at most %u",
                            api, tag, len, GPUMEM_TAG_MAX);
    const char *interned = tag_intern(tag, len);
    if (!interned)
        return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                            "%s(\"%s\"): %u distinct tags are interned already (or host "
                            "memory ran out); reuse tags rather than making one per "
                            "allocation",
                            api, tag, GPUMEM_TAGS_MAX);
    gpumem__tag = interned;
    return GPUMEM_OK;
}

const char *gpumem_get_tag(void) { return gpumem__tag; }
