/*
 * component_slots.c - lets an optional component (clflash_mpi) keep state as long as a context:
 * a few slots of (key, data, release) in the context, found by key, released when the context is
 * freed (component.h).
 *
 * Why in the context: what a component wants to keep between calls (the ring's pinned staging)
 * belongs to one context's OpenCL objects and must go before them, and the public API has no
 * call for a component to be told that a context is going away.
 */
#include "component.h"
#include "internal.h"

void *clflash_component_data(clflash_context *c, const void *key)
{
    if (c == NULL || c->magic != CLFLASH_CONTEXT_MAGIC || key == NULL)
        return NULL;
    void *data = NULL;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < CLFLASH_COMPONENT_SLOTS; i++)
        if (c->components[i].key == key)
            data = c->components[i].data;
    pthread_mutex_unlock(&c->lock);
    return data;
}

clflash_status clflash_component_attach(clflash_context *c, const void *key, void *data, void (*release)(void *data),
                                        void **existing)
{
    if (existing != NULL)
        *existing = NULL;
    if (clflash_check_context(c) != CLFLASH_SUCCESS)
        return CLFLASH_ERROR_INVALID_ARGUMENT;
    if (key == NULL || data == NULL || release == NULL)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "a component slot needs a key, data and a release");
    int found = -1, empty = -1;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < CLFLASH_COMPONENT_SLOTS; i++) {
        if (c->components[i].key == key)
            found = i;
        else if (c->components[i].key == NULL && empty < 0)
            empty = i;
    }
    if (found >= 0) {
        if (existing != NULL)
            *existing = c->components[found].data;
    } else if (empty >= 0) {
        c->components[empty].key = key;
        c->components[empty].data = data;
        c->components[empty].release = release;
    }
    pthread_mutex_unlock(&c->lock);
    if (found < 0 && empty < 0)
        return clflash_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "every one of the context's %d component slots is taken",
                            CLFLASH_COMPONENT_SLOTS);
    return CLFLASH_SUCCESS;
}

void clflash_component_slots_free(clflash_context *c)
{
    for (int i = 0; i < CLFLASH_COMPONENT_SLOTS; i++)
        if (c->components[i].key != NULL) {
            c->components[i].release(c->components[i].data);
            c->components[i].key = NULL;
        }
}
