/*
 * version.c - the linked library's version, so a caller can check it against the header's macros.
 */
#include "clflash.h"

#define CLFLASH_STR2_(x) #x
#define CLFLASH_STR_(x) CLFLASH_STR2_(x)

unsigned clflash_version_number(void)
{
    return CLFLASH_VERSION_NUMBER;
}

const char *clflash_version_string(void)
{
    return CLFLASH_STR_(CLFLASH_VERSION_MAJOR) "." CLFLASH_STR_(CLFLASH_VERSION_MINOR) "." CLFLASH_STR_(
        CLFLASH_VERSION_PATCH);
}
