/*
 * tune_reference.c - the fp64 attention, forward and backward, of clflash-tune's check shape.
 *
 * Why a file of its own: clflash-tune must reject a candidate that is fast but wrong, and a
 * comparison with the planner's configuration alone would accept a planner that is wrong too;
 * this is the independent answer, written out the textbook way (scores, softmax, then the
 * products), row by row, for the tool's small check shape only.
 */
#include "tune_reference.h"

#include "bench_flash.h" /* element_value */
#include "tool_common.h" /* xmalloc */

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The softmax row of query i (Q row at qrow, its K/V head's rows from kbase): p[j] the normalised
 * probabilities, 0 where masked. Returns 0 when the row sees no key (every p[j] 0). */
static int row_probabilities(const tune_shape *s, const void *q, const void *k, size_t qrow, size_t kbase, uint32_t i,
                             double *p)
{
    const uint32_t d = s->head_dim;
    const double scale = 1.0 / sqrt((double)d);
    double m = -INFINITY, l = 0.0;
    for (uint32_t j = 0; j < s->seq_k; j++) {
        if (s->causal && (int64_t)j > (int64_t)i + s->seq_k - s->seq_q) {
            p[j] = -INFINITY;
            continue;
        }
        double dot = 0.0;
        for (uint32_t c = 0; c < d; c++)
            dot += element_value(q, qrow + c, s->dtype) * element_value(k, kbase + (size_t)j * d + c, s->dtype);
        p[j] = dot * scale;
        if (p[j] > m)
            m = p[j];
    }
    if (m == -INFINITY) {
        for (uint32_t j = 0; j < s->seq_k; j++)
            p[j] = 0.0;
        return 0;
    }
    for (uint32_t j = 0; j < s->seq_k; j++) {
        p[j] = p[j] == -INFINITY ? 0.0 : exp(p[j] - m);
        l += p[j];
    }
    for (uint32_t j = 0; j < s->seq_k; j++)
        p[j] /= l;
    return 1;
}

/* Row i's O = sum_j p[j] V[j] into o (head_dim values). */
static void row_output(const tune_shape *s, const void *v, size_t kbase, const double *p, double *o)
{
    const uint32_t d = s->head_dim;
    for (uint32_t c = 0; c < d; c++)
        o[c] = 0.0;
    for (uint32_t j = 0; j < s->seq_k; j++)
        if (p[j] != 0.0)
            for (uint32_t c = 0; c < d; c++)
                o[c] += p[j] * element_value(v, kbase + (size_t)j * d + c, s->dtype);
}

void tune_reference_forward(const tune_shape *s, const void *q, const void *k, const void *v, double *out)
{
    const uint32_t d = s->head_dim, group = s->heads_q / s->heads_kv;
    double *p = xmalloc(s->seq_k * sizeof *p);
    for (uint32_t b = 0; b < s->batch; b++)
        for (uint32_t h = 0; h < s->heads_q; h++)
            for (uint32_t i = 0; i < s->seq_q; i++) {
                const size_t qrow = (((size_t)b * s->heads_q + h) * s->seq_q + i) * d;
                const size_t kbase = ((size_t)b * s->heads_kv + h / group) * s->seq_k * d;
                row_probabilities(s, q, k, qrow, kbase, i, p); /* a row that sees no key: O = 0 */
                row_output(s, v, kbase, p, out + qrow);
            }
    free(p);
}

void tune_reference_backward(const tune_shape *s, const void *q, const void *k, const void *v, const void *d_o,
                             double *dq, double *dk, double *dv)
{
    const uint32_t d = s->head_dim, group = s->heads_q / s->heads_kv;
    const double scale = 1.0 / sqrt((double)d);
    const size_t nq = (size_t)s->batch * s->heads_q * s->seq_q * d, nk = (size_t)s->batch * s->heads_kv * s->seq_k * d;
    double *p = xmalloc(s->seq_k * sizeof *p), *o = xmalloc(d * sizeof *o);
    memset(dq, 0, nq * sizeof *dq);
    memset(dk, 0, nk * sizeof *dk);
    memset(dv, 0, nk * sizeof *dv);
    for (uint32_t b = 0; b < s->batch; b++)
        for (uint32_t h = 0; h < s->heads_q; h++)
            for (uint32_t i = 0; i < s->seq_q; i++) {
                const size_t qrow = (((size_t)b * s->heads_q + h) * s->seq_q + i) * d;
                const size_t kbase = ((size_t)b * s->heads_kv + h / group) * s->seq_k * d;
                if (!row_probabilities(s, q, k, qrow, kbase, i, p))
                    continue; /* a row that sees no key: no gradient */
                row_output(s, v, kbase, p, o);
                /* D = rowsum(dO * O), then per key dP, dS and the three sums */
                double dsum = 0.0;
                for (uint32_t c = 0; c < d; c++)
                    dsum += element_value(d_o, qrow + c, s->dtype) * o[c];
                for (uint32_t j = 0; j < s->seq_k; j++) {
                    if (p[j] == 0.0)
                        continue;
                    const size_t krow = kbase + (size_t)j * d;
                    double dp = 0.0;
                    for (uint32_t c = 0; c < d; c++)
                        dp += element_value(d_o, qrow + c, s->dtype) * element_value(v, krow + c, s->dtype);
                    const double ds = p[j] * (dp - dsum);
                    for (uint32_t c = 0; c < d; c++) {
                        dq[qrow + c] += scale * ds * element_value(k, krow + c, s->dtype);
                        dk[krow + c] += scale * ds * element_value(q, qrow + c, s->dtype);
                        dv[krow + c] += p[j] * element_value(d_o, qrow + c, s->dtype);
                    }
                }
            }
    free(p);
    free(o);
}
