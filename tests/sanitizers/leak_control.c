/*
 * leak_control.c - the negative control of the sanitizer run: it creates a clflash context, builds
 * a kernel in it (so PoCL and LLVM leak what they always leak) and then loses the context on
 * purpose. Built and run only in the sanitizer tree (tests/reliability.cmake), where the test
 * passes only if LeakSanitizer, with tests/lsan.supp in force, still reports the lost context
 * with clflash_context_create in its allocation stack: the suppressions hide PoCL's leaks, not
 * clflash's.
 */
#include "clflash.h"

#include <stdio.h>

static clflash_context *lost;

int main(void)
{
    clflash_attention_desc d = {.struct_size = sizeof d};
    clflash_plan plan = {.struct_size = sizeof plan};
    clflash_status st = clflash_context_create_default(NULL, &lost);
    if (st != CLFLASH_SUCCESS) {
        fprintf(stderr, "no context: %s\n", clflash_status_string(st));
        return 2;
    }
    d.batch = d.heads_q = 1;
    d.seq_q = d.seq_k = 5;
    d.head_dim = 8;
    d.dtype = CLFLASH_F32;
    st = clflash_plan_attention(lost, &d, &plan);
    printf("planned: %s\n", clflash_status_string(st));
    lost = NULL; /* the only pointer to the context is gone: a leak of clflash's own */
    return 0;
}
