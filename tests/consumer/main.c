/*
 * main.c - the smallest program a user of the installed clflash writes: include the header, link
 * the library, and check that the two agree. Built by consumer_test.cmake against an install
 * prefix, through find_package(clflash) and through pkg-config.
 */
#include <clflash.h>

#include <stdio.h>

int main(void)
{
    const unsigned linked = clflash_version_number();
    if (linked != CLFLASH_VERSION_NUMBER) {
        fprintf(stderr, "header says %u, library says %u\n", (unsigned)CLFLASH_VERSION_NUMBER, linked);
        return 1;
    }
    const uint64_t tile = clflash_tile_bytes(64, 128, 2);
    if (tile != 57344u) {
        fprintf(stderr, "clflash_tile_bytes(64, 128, 2) = %llu, expected 57344\n", (unsigned long long)tile);
        return 1;
    }
    /* A descriptor as a program writes one: struct_size first, the rest zero unless set. */
    clflash_attention_desc d = {.struct_size = sizeof d};
    d.batch = d.heads_q = 1;
    d.seq_q = d.seq_k = 64;
    d.head_dim = 128;
    d.dtype = CLFLASH_F16;
    if (clflash_traffic_bytes(&d, CLFLASH_ALGO_NAIVE, 0) == 0) {
        fprintf(stderr, "clflash_traffic_bytes refused a descriptor with struct_size %u\n", (unsigned)d.struct_size);
        return 1;
    }
    printf("clflash %s (%u): tile_bytes(64, 128, 2) = %llu\n", clflash_version_string(), linked,
           (unsigned long long)tile);
    return 0;
}
