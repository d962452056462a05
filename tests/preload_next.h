/*
 * preload_next.h - what the test-only LD_PRELOAD libraries of OpenCL entry points share (tests/
 * staging_refuse_preload.c, transfer_delay_preload.c, build_fail_preload.c): the real function of
 * a name, the next definition after the library. Each library wraps a few entry points and hands
 * every call it does not change to the real one.
 */
#ifndef CLFLASH_TESTS_PRELOAD_NEXT_H
#define CLFLASH_TESTS_PRELOAD_NEXT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

/* The next definition of `name` after this library, as an object pointer (copy it into a function
 * pointer with memcpy: POSIX's conversion, without ISO C's warning). Aborts where there is none,
 * since no test could mean anything then; `library` names the caller in that message. dlsym is
 * thread-safe and every thread gets the same answer, so callers may cache it without a lock. */
static inline void *preload_next(const char *library, const char *name)
{
    void *sym = dlsym(RTLD_NEXT, name);
    if (sym == NULL) {
        fprintf(stderr, "%s: no %s after this library: %s\n", library, name, dlerror());
        abort();
    }
    return sym;
}

#endif
