/*
 * ring_shared.c - the ring's node-local transport: when every rank of the ring runs on one node,
 * K/V shards never go through MPI messages. Each rank reads its own shard from its device once,
 * into its segment of an MPI shared-memory window (MPI_Win_allocate_shared), and every other rank
 * uploads that shard to its device straight from there at the step that needs it. A shard then
 * crosses host memory once per reader (the upload), where the message path copies it between the
 * processes first (one or two copies by MPI) and forwards it P - 1 times.
 *
 * Why a window rather than POSIX shared memory of our own: MPI already knows which ranks share a
 * node (MPI_Comm_split_type), places and names the segments, and cleans them up with the job.
 * The window is kept with the caller's communicator (an MPI attribute) for the next call, like the
 * pinned staging with the context, and freed with the communicator (MPI_Comm_free); a call that
 * needs a larger segment on some rank replaces it on every rank.
 *
 * The choice (ring_transport_choose) is collective and made per call: CLFLASH_RING_TRANSPORT=mpi
 * forces the message path, =shared requires this one (an error where the ranks span nodes or the
 * window cannot be had), unset or =auto takes this one where every rank shares the node and the
 * window is granted, else the message path.
 */
#include "ring_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* What CLFLASH_RING_TRANSPORT asks for: -1 unknown value, 0 mpi, 1 auto, 2 shared. */
static int transport_asked(void)
{
    const char *v = getenv("CLFLASH_RING_TRANSPORT");
    if (v == NULL || *v == '\0' || strcmp(v, "auto") == 0)
        return 1;
    if (strcmp(v, "mpi") == 0)
        return 0;
    if (strcmp(v, "shared") == 0)
        return 2;
    return -1;
}

clflash_status ring_transport_choose(MPI_Comm comm, int *mode)
{
    *mode = 0;
    int size = 0, node_size = 0;
    MPI_Comm_size(comm, &size);
    MPI_Comm node = MPI_COMM_NULL;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS &&
        node != MPI_COMM_NULL) {
        MPI_Comm_size(node, &node_size);
        MPI_Comm_free(&node);
    }
    /* [0] the smallest request, [1] minus the largest, [2] 1 unless some rank's node lacks a rank,
     * [3] -1 where some rank's CLFLASH_RING_PIN is an unknown value (each rank follows its own) */
    const int asked = transport_asked(), pin = ring_pin_asked();
    int mine[4] = {asked, -asked, node_size == size, pin < 0 ? -1 : 0}, all[4] = {0, 0, 0, 0};
    if (MPI_Allreduce(mine, all, 4, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
        return ring_fail(CLFLASH_RING_ERROR_MPI, "MPI_Allreduce choosing the ring's transport failed");
    if (all[3] < 0)
        return pin < 0 ? ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "CLFLASH_RING_PIN must be auto, on or off, not '%s'",
                                   getenv("CLFLASH_RING_PIN"))
                       : ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "CLFLASH_RING_PIN is an unknown value on some rank");
    if (all[0] < 0)
        return asked < 0 ? ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT,
                                     "CLFLASH_RING_TRANSPORT must be auto, mpi or shared, not '%s'",
                                     getenv("CLFLASH_RING_TRANSPORT"))
                         : ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT,
                                     "CLFLASH_RING_TRANSPORT must be auto, mpi or shared on every rank");
    if (all[0] != -all[1])
        return ring_fail(CLFLASH_ERROR_INVALID_ARGUMENT, "the ranks disagree on CLFLASH_RING_TRANSPORT");
    if (all[0] == 2 && !all[2])
        return ring_fail(CLFLASH_ERROR_UNSUPPORTED,
                         "CLFLASH_RING_TRANSPORT=shared, but the ranks of the ring are not all on one node");
    *mode = all[2] ? all[0] : 0;
    return CLFLASH_SUCCESS;
}

/* A window kept with the caller's communicator (an MPI attribute) for the next call: creating one
 * and touching its pages for the first time costs about as much as a step. Freed by
 * delete_kept when the communicator is freed, or by at_finalize at the start of MPI_Finalize (MPI
 * deletes MPI_COMM_SELF's attributes first, while everything still works; the other
 * communicators' attributes go later, when freeing a window no longer can). */
typedef struct kept_window {
    MPI_Comm comm; /* the window's own duplicate of the caller's communicator (MPI_COMM_NULL: none) */
    MPI_Win win;   /* MPI_WIN_NULL: none */
    int locked;    /* MPI_Win_lock_all done */
    unsigned char **seg; /* [P] */
    size_t *seg_bytes;   /* [P]: their sizes */
    size_t bytes;        /* this rank's segment */
    int size;            /* P */
    cl_context pin_ctx;  /* ring_shared_pin: the OpenCL context the segments are registered with (retained) */
    cl_mem *pin;         /* [P]: a CL_MEM_USE_HOST_PTR buffer over each segment, or NULL */
    int released;        /* win and comm freed (at_finalize) */
    struct kept_window *next; /* every kept window of the process, oldest first */
} kept_window;

static int kept_key = MPI_KEYVAL_INVALID, finalize_key = MPI_KEYVAL_INVALID;
static kept_window *kept_list;
/* The keys and the list are the process's: ring calls on different communicators may run on
 * different threads (MPI_THREAD_MULTIPLE). */
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

/* Drops k's registration of its segments with a driver (ring_shared_pin). */
static void unpin(kept_window *k)
{
    for (int r = 0; k->pin != NULL && r < k->size; r++)
        if (k->pin[r] != NULL)
            clReleaseMemObject(k->pin[r]);
    free(k->pin);
    k->pin = NULL;
    if (k->pin_ctx != NULL)
        clReleaseContext(k->pin_ctx);
    k->pin_ctx = NULL;
}

/* Frees k's window and communicator (collective over k->comm) once; its registrations first,
 * while the memory they cover is still mapped. */
static void release(kept_window *k)
{
    if (k->released)
        return;
    k->released = 1;
    unpin(k);
    if (k->locked)
        MPI_Win_unlock_all(k->win);
    if (k->win != MPI_WIN_NULL)
        MPI_Win_free(&k->win);
    if (k->comm != MPI_COMM_NULL)
        MPI_Comm_free(&k->comm);
}

static void unlink_kept(kept_window *k)
{
    pthread_mutex_lock(&kept_lock);
    for (kept_window **at = &kept_list; *at != NULL; at = &(*at)->next)
        if (*at == k) {
            *at = k->next;
            break;
        }
    pthread_mutex_unlock(&kept_lock);
}

static int delete_kept(MPI_Comm comm, int key, void *value, void *extra)
{
    (void)comm, (void)key, (void)extra;
    kept_window *k = value;
    unlink_kept(k);
    release(k);
    free(k->seg);
    free(k->seg_bytes);
    free(k);
    return MPI_SUCCESS;
}

/* Every rank releases its windows in the order they were made, which is an order all ranks that
 * share a window agree on as long as windows on communicators with common ranks are made in the
 * same order everywhere (clflash_mpi.h's thread rule). */
static int at_finalize(MPI_Comm comm, int key, void *value, void *extra)
{
    (void)comm, (void)key, (void)value, (void)extra;
    for (kept_window *k = kept_list; k != NULL; k = k->next)
        release(k);
    return MPI_SUCCESS;
}

/* The two attribute keys, and the finalize hook on MPI_COMM_SELF; 0 where MPI refuses them. */
static int keys_ready(void)
{
    pthread_mutex_lock(&kept_lock);
    int key = kept_key;
    if (key == MPI_KEYVAL_INVALID &&
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, at_finalize, &finalize_key, NULL) == MPI_SUCCESS &&
        MPI_Comm_set_attr(MPI_COMM_SELF, finalize_key, NULL) == MPI_SUCCESS &&
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_kept, &key, NULL) == MPI_SUCCESS)
        kept_key = key;
    pthread_mutex_unlock(&kept_lock);
    return key != MPI_KEYVAL_INVALID;
}

/* Makes k's window of own_bytes over a duplicate of caller. Every rank makes the same collective
 * calls (the duplicate, the allocation) whatever fails on it; returns 0 where some local step
 * failed (the caller agrees on the outcome and releases k everywhere if any rank failed). */
static int make_window(kept_window *k, MPI_Comm caller, size_t own_bytes)
{
    k->comm = MPI_COMM_NULL;
    k->win = MPI_WIN_NULL;
    int ok = MPI_Comm_dup(caller, &k->comm) == MPI_SUCCESS;
    if (!ok)
        k->comm = MPI_COMM_NULL;
    /* (MPI fails a duplicate on every rank together; were it to fail on one alone, the allocation
     * still runs there, on the caller's communicator, so that no rank skips it) */
    const MPI_Comm on = ok ? k->comm : caller;
    int size = 0;
    MPI_Comm_size(on, &size);
    /* each segment on its owner's memory (NUMA), not one block */
    MPI_Info info = MPI_INFO_NULL;
    if (MPI_Info_create(&info) == MPI_SUCCESS)
        MPI_Info_set(info, "alloc_shared_noncontig", "true");
    MPI_Errhandler old = MPI_ERRHANDLER_NULL;
    MPI_Comm_get_errhandler(on, &old);
    MPI_Comm_set_errhandler(on, MPI_ERRORS_RETURN);
    void *base = NULL;
    if (MPI_Win_allocate_shared((MPI_Aint)(own_bytes ? own_bytes : 1), 1, info, on, &base, &k->win) != MPI_SUCCESS) {
        k->win = MPI_WIN_NULL;
        ok = 0;
    }
    MPI_Comm_set_errhandler(on, old);
    if (old != MPI_ERRHANDLER_NULL)
        MPI_Errhandler_free(&old);
    if (info != MPI_INFO_NULL)
        MPI_Info_free(&info);
    if (k->win == MPI_WIN_NULL)
        return 0;
    k->seg = calloc((size_t)size, sizeof *k->seg);
    k->seg_bytes = calloc((size_t)size, sizeof *k->seg_bytes);
    k->size = size;
    ok = ok && k->seg != NULL && k->seg_bytes != NULL;
    for (int r = 0; r < size && ok; r++) {
        MPI_Aint bytes = 0;
        int unit = 0;
        void *p = NULL;
        ok = MPI_Win_shared_query(k->win, r, &bytes, &unit, &p) == MPI_SUCCESS && p != NULL;
        k->seg[r] = p;
        k->seg_bytes[r] = (size_t)bytes;
    }
    k->locked = ok && MPI_Win_lock_all(MPI_MODE_NOCHECK, k->win) == MPI_SUCCESS;
    k->bytes = own_bytes;
    return ok && k->locked;
}

clflash_status ring_shared_open(ring_shared *s, MPI_Comm caller, MPI_Comm comm, size_t own_bytes, int required)
{
    memset(s, 0, sizeof *s);
    const int keys = keys_ready();
    kept_window *k = NULL;
    int found = 0;
    if (keys)
        MPI_Comm_get_attr(caller, kept_key, &k, &found);
    if (!found)
        k = NULL;
    /* a new window on every rank when any rank has none or one too small. Windows are made,
     * kept and dropped together below, so every rank has one or none. */
    int renew = k == NULL || k->bytes < own_bytes, any = 0;
    if (MPI_Allreduce(&renew, &any, 1, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS)
        return ring_fail(CLFLASH_RING_ERROR_MPI, "MPI_Allreduce before the shared-memory window failed");
    if (any) {
        if (k != NULL)
            MPI_Comm_delete_attr(caller, kept_key); /* delete_kept frees it (collective) */
        kept_window local; /* stands in where the allocation below fails, so the collectives still run */
        memset(&local, 0, sizeof local);
        kept_window *made = calloc(1, sizeof *made);
        k = made != NULL ? made : &local;
        int ok = make_window(k, caller, own_bytes) && made != NULL && keys;
        const int attached = ok && MPI_Comm_set_attr(caller, kept_key, k) == MPI_SUCCESS;
        ok = attached;
        int all = 0;
        if (MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
            all = 0; /* (then every rank drops its window below, as each sees the failure) */
        if (!all) { /* every rank drops what it made: the same collective frees everywhere */
            if (attached) {
                MPI_Comm_delete_attr(caller, kept_key); /* delete_kept */
            } else if (made != NULL) {
                delete_kept(caller, kept_key, made, NULL);
            } else {
                release(&local);
                free(local.seg);
                free(local.seg_bytes);
            }
            return required ? ring_fail(CLFLASH_ERROR_UNSUPPORTED,
                                        "CLFLASH_RING_TRANSPORT=shared, but MPI gave no shared-memory window of "
                                        "%llu bytes on every rank",
                                        (unsigned long long)own_bytes)
                            : CLFLASH_SUCCESS;
        }
        pthread_mutex_lock(&kept_lock);
        kept_window **tail = &kept_list;
        while (*tail != NULL)
            tail = &(*tail)->next;
        *tail = k;
        pthread_mutex_unlock(&kept_lock);
    }
    s->open = 1;
    s->win = k->win;
    s->seg = k->seg;
    s->kept = k;
    return CLFLASH_SUCCESS;
}

int ring_pin_asked(void)
{
    const char *v = getenv("CLFLASH_RING_PIN");
    if (v == NULL || *v == '\0' || strcmp(v, "auto") == 0)
        return 0;
    if (strcmp(v, "on") == 0)
        return 1;
    if (strcmp(v, "off") == 0)
        return 2;
    return -1;
}

void ring_shared_pin(ring_shared *s, clflash_context *ctx)
{
    if (!s->open)
        return;
    kept_window *k = s->kept;
    const cl_context cl = clflash_context_cl(ctx);
    cl_device_type type = 0;
    clGetDeviceInfo(clflash_context_device(ctx), CL_DEVICE_TYPE, sizeof type, &type, NULL);
    const int asked = ring_pin_asked(); /* an unknown value was refused by ring_transport_choose */
    if (asked == 2 || (asked == 0 && (type & CL_DEVICE_TYPE_CPU))) {
        unpin(k);
        return;
    }
    if (k->pin_ctx != cl) { /* registered with another context, or not yet */
        unpin(k);
        k->pin = calloc((size_t)k->size, sizeof *k->pin);
        if (k->pin == NULL || clRetainContext(cl) != CL_SUCCESS) {
            unpin(k);
            return;
        }
        k->pin_ctx = cl;
        for (int r = 0; r < k->size; r++) {
            cl_int err = CL_SUCCESS;
            k->pin[r] = clCreateBuffer(cl, CL_MEM_USE_HOST_PTR | CL_MEM_READ_WRITE, k->seg_bytes[r], k->seg[r], &err);
            if (err != CL_SUCCESS)
                k->pin[r] = NULL;
        }
    }
    s->pinned = 1;
    for (int r = 0; r < k->size; r++)
        s->pinned &= k->pin[r] != NULL;
}

void ring_shared_sync(ring_shared *s)
{
    if (s->open)
        MPI_Win_sync(s->win);
}

void ring_shared_close(ring_shared *s, MPI_Comm comm)
{
    if (!s->open)
        return;
    /* no rank may write its segment again (the next call) while another still reads it */
    MPI_Barrier(comm);
    MPI_Win_sync(s->win);
    memset(s, 0, sizeof *s);
}
