/* Allocation tags (tag.h): the per-thread current tag and the process-wide list
 * of interned texts, each with its number and in the table of texts by number.
 * The list is pushed by compare-and-swap and never shrinks, so readers walk it
 * without a lock and a tag's text outlives every chunk that holds its number; a
 * race may intern one text twice, which only costs a node and a number. A forked
 * child inherits a list that is whole (a push is one atomic store), and a number
 * is published in the table before the thread that asked for it can use it. */
#include "tag.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct tag_node {
    struct tag_node *next;
    uint32_t number;
    char text[];
};

static _Atomic(struct tag_node *) tags;
static atomic_uint tag_count;                                /* numbers handed out */
static _Atomic(const char *) tag_texts[GPUMEM_TAGS_MAX + 1]; /* by number */
_Thread_local uint32_t gpumem__tag;

/* The number of the interned copy of text, or 0 when it is new and the table is
 * full or host memory ran out. */
static uint32_t tag_intern(const char *text, size_t len)
{
    struct tag_node *head = atomic_load_explicit(&tags, memory_order_acquire);
    for (struct tag_node *n = head; n; n = n->next)
        if (strcmp(n->text, text) == 0)
            return n->number;
    /* a number lost to a failed malloc is not handed out again: it only costs
     * one of the GPUMEM_TAGS_MAX */
    unsigned number = atomic_fetch_add(&tag_count, 1) + 1;
    if (number > GPUMEM_TAGS_MAX) {
        atomic_fetch_sub(&tag_count, 1);
        return 0;
    }
    struct tag_node *node = malloc(sizeof *node + len + 1);
    if (!node)
        return 0;
    node->number = number;
    memcpy(node->text, text, len + 1);
    atomic_store_explicit(&tag_texts[number], node->text, memory_order_release);
    node->next = head;
    while (!atomic_compare_exchange_weak_explicit(&tags, &node->next, node,
                                                  memory_order_release,
                                                  memory_order_acquire))
        ;
    return number;
}

const char *gpumem__tag_text(uint64_t n)
{
    return n >= 1 && n <= GPUMEM_TAGS_MAX
               ? atomic_load_explicit(&tag_texts[n], memory_order_acquire)
               : NULL;
}

gpumem_status gpumem_set_tag(const char *tag)
{
    static const char api[] = "gpumem_set_tag";
    if (!tag || !tag[0]) {
        gpumem__tag = 0;
        return GPUMEM_OK;
    }
    size_t len = strlen(tag);
    if (len > GPUMEM_TAG_MAX)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s(\"%.32s...\"): the tag is %zu bytes long; at most %u",
                            api, tag, len, GPUMEM_TAG_MAX);
    uint32_t number = tag_intern(tag, len);
    if (!number)
        return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                            "%s(\"%s\"): %u distinct tags are interned already (or host "
                            "memory ran out); reuse tags rather than making one per "
                            "allocation",
                            api, tag, GPUMEM_TAGS_MAX);
    gpumem__tag = number;
    return GPUMEM_OK;
}

const char *gpumem_get_tag(void) { return gpumem__tag_text(gpumem__tag); }
