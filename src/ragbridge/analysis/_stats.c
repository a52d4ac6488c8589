/* The resampling loops of ragbridge.analysis.stats in C: Kendall's merge over posterior draws, the
 * bootstrap of a mean and the sign flips of the paired permutation test. Each gives the numbers of
 * the NumPy steps beside its call in stats.py to the last bit (those steps are used where the package
 * was built without this module), so a seed gives the same interval and p-value either way.
 *
 * merge_places(order, key): the places of Kendall's merge, made and checked once and kept in C (a
 *   capsule), for every block of draws of a figure. `order` (int32) puts the columns of the weights in
 *   order of (x, y); `key` (int32, size of them, a power of 2) each such place's rank of y, highest y
 *   smallest. Each level (half blocks 1, 2, 4, ...) keeps n = size / 2 places of each merged block's
 *   left cases, by y highest first (then by place), block after block (`lefts`); the places of the
 *   right cases likewise (`rights`); and for each right case where its block's running sum of left
 *   weights strictly above it is (1 + block * half + k for the sum of the first k + 1), or 0 for none
 *   (`at`): the levels of `_kendall`'s NumPy steps, made by a merge sort instead of a sort a level.
 * kendall_discordant(w, places): the strictly discordant weight of each draw (a row of `w`, float64,
 *   C order), as a list of floats: the draw's weights in order of (x, y), rounded to single precision
 *   and padded with zeros to `size`, merged level by level. No level (one case): every weight is 0.
 * kendall_alone(w, places, out[, threads]): the same of each row merged as a block of one draw (in
 *   double precision, each level's dot product as numpy's einsum of one row sums it; see
 *   `level_alone`); with threads 2 or more the levels are independent and shared by two threads.
 *
 * The additions are those of the NumPy steps, in their order and precision: each block's running sum
 * in single precision, one addition after the other; the level's dot product of the right cases'
 * running sums and weights in single precision, one product rounded and then added after the other,
 * from zero (what numpy's einsum does for those operands: one of them strided); the level's sum added
 * to the draw's double-precision total. No multiply-add may be fused (setup.py builds this file with
 * -ffp-contract=off; the products are rounded before each addition).
 *
 * bootstrap_means(values, state, n_resamples, block, dist): `dist[r]`, the mean of resample r of
 *   `values` (float64, n >= 2 of them), for r < n_resamples, as bootstrap_interval's NumPy steps
 *   compute it: for each block of `block` resamples, `rng.integers(0, n, size=(k, n), dtype=int16 if
 *   n < 2**15 else int32)`, the values gathered and `np.mean(..., axis=-1)`. `state`: the generator's
 *   PCG64 state (state high and low 64 bits, increment high and low, has_uint32, uinteger); returns
 *   the state NumPy's calls would have left, for the caller to set.
 * sign_flip_counts(d, state, n_resamples, block, total, observed, gamma): `(n_less, n_greater,
 *   state)` of paired_permutation_pvalue's random sign flips of the differences `d` (float64, 8 a
 *   byte, padded with zeros): for each block, `rng.integers(0, 256, size=(k, nbytes), dtype=uint8)`; a
 *   resample's sum is the pairwise sum of the sums its high half bytes select plus that of its low
 *   half bytes' (a half byte's four differences, its highest bit the first, added one after the other
 *   where selected: the entries of the NumPy steps' table, made here as they are read, so the 32
 *   values a byte are never stored), its statistic `2 * sum - total`, counted where `<= observed +
 *   gamma` and where `>= observed - gamma`.
 *
 * runs, run_sums, mid_ranks, weighted_pearson: the agreement figures' steps on a block of posterior
 *   weights, a row at a time (`_Runs.sums`, `_mid_ranks`, `_pearson_of`; see each), a column's runs
 *   checked once and kept (`runs`), as the merge's places are.
 *
 * NumPy's draws (numpy/random/src/distributions/distributions.c): a bounded integer below 2**16 takes
 * 16 bits of a 32-bit draw at a time, low half first (one buffer a call); below 2**32, a 32-bit draw;
 * either is scaled by Lemire's multiply with rejection; a byte of 0..255 is 8 bits of a 32-bit draw,
 * lowest first. Its sums along a row (numpy/_core/src/umath/loops_utils.h.src) are pairwise: under 8
 * values one after the other; up to 128 in 8 running sums added as ((0+1)+(2+3))+((4+5)+(6+7)), then
 * the rest one by one; above, split at the half rounded down to a multiple of 8. Its add.reduceat of
 * a run is the run's first value plus the pairwise sum of the others; its cumsum one addition after
 * the other.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#define RAGBRIDGE_THREADS  /* a draw merged alone may share its levels between two threads */
#endif

#define AHEAD 64  /* values fetched ahead of their use */
#define EPS_ 1e-12  /* stats.EPS: a sum of weights at most this is none */

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static int
get_buffer(PyObject *obj, Py_buffer *view, const char *what, const char *format, int ndim)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->ndim != ndim || strcmp(view->format, format) != 0) {
        PyErr_Format(PyExc_ValueError, "%s: a C-ordered array of %d dimensions of format '%s' is needed",
                     what, ndim, format);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* The merge of one draw: its weights `v` (single precision, by (x, y), `size` of them padded with
 * zeros), `sums` room for 1 + size / 2 running sums. */
static double
merge(const float *v, float *sums, const int32_t *lefts, const int32_t *rights, const int32_t *at,
      Py_ssize_t levels, Py_ssize_t n)
{
    double discordant = 0.0;
    sums[0] = 0.0f;
    for (Py_ssize_t level = 0, half = 1; level < levels; level++, half *= 2) {
        const int32_t *l = lefts + level * n, *r = rights + level * n, *a = at + level * n;
        for (Py_ssize_t start = 0; start < n; start += half) {
            float s = v[l[start]];
            sums[1 + start] = s;
            for (Py_ssize_t k = start + 1; k < start + half; k++) {
                s = s + v[l[k]];
                sums[1 + k] = s;
            }
        }
        float dot = 0.0f;
        for (Py_ssize_t k = 0; k < n; k++) {
            float product = sums[a[k]] * v[r[k]];
            dot = dot + product;
        }
        discordant = discordant + (double)dot;
    }
    return discordant;
}

/* The merge's places, made and checked once and kept (a capsule of `merge_places`): `order`, m places
 * among the weights' columns (`widest` - 1 the largest); each level's `lefts` and `rights` (n places
 * among size = 2n each) and `at` (n places among its running sums). The draws' calls (one a draw
 * where a block holds one) check only that the weights have the columns `order` names. */
typedef struct {
    Py_ssize_t m, levels, n, widest;
    int32_t *order, *lefts, *rights, *at;
} places_t;

#define PLACES "ragbridge.analysis._stats.places"

static void
places_free(PyObject *capsule)
{
    PyMem_Free(PyCapsule_GetPointer(capsule, PLACES));
}

/* Every level of the merge of `size` = 2n places whose keys are `key` (smaller first), into `p`: a merge
 * sort bottom up. Before level L, `sorted` holds each block of 2**L places by key, then place (so a
 * block's left half precedes its right half among equal keys); the level's lefts and rights are the
 * halves of each block of 2**(L + 1) as they stand, and a right case's `at` counts the left cases of
 * strictly smaller key (those before it when equal keys put the right half first); the halves merged by
 * key, then place, make the next level's blocks. */
static void
make_levels(places_t *p, const int32_t *key, int32_t *sorted, int32_t *next)
{
    Py_ssize_t n = p->n, size = 2 * n;
    for (Py_ssize_t i = 0; i < size; i++)
        sorted[i] = (int32_t)i;
    for (Py_ssize_t level = 0, half = 1; level < p->levels; level++, half *= 2) {
        int32_t *lefts = p->lefts + level * n, *rights = p->rights + level * n, *at = p->at + level * n;
        for (Py_ssize_t start = 0; start < size; start += 2 * half) {
            const int32_t *l = sorted + start, *r = sorted + start + half;
            Py_ssize_t base = start / 2, i = 0;
            memcpy(lefts + base, l, sizeof(int32_t) * half);
            memcpy(rights + base, r, sizeof(int32_t) * half);
            for (Py_ssize_t j = 0; j < half; j++) {
                while (i < half && key[l[i]] < key[r[j]])
                    i++;
                at[base + j] = i > 0 ? (int32_t)(base + i) : 0;
            }
            Py_ssize_t k = start;
            i = 0;
            for (Py_ssize_t j = 0; j < half; j++) {
                while (i < half && key[l[i]] <= key[r[j]])
                    next[k++] = l[i++];
                next[k++] = r[j];
            }
            while (i < half)
                next[k++] = l[i++];
        }
        int32_t *t = sorted;
        sorted = next;
        next = t;
    }
}

/* merge_places(order, key): the places of the merge of weights put in order of (x, y) by `order`
 * (int32, m places among the weights' columns), padded to size = len(key) places, a power of 2 of at
 * least m, each place's `key` (int32: smaller y first) saying where it goes: log2(size) levels of
 * size / 2 right cases each, made here. */
static PyObject *
merge_places(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "merge_places(order, key) takes 2 arguments");
        return NULL;
    }
    Py_buffer bo, bk;
    if (get_buffer(args[0], &bo, "order", "i", 1) < 0)
        return NULL;
    if (get_buffer(args[1], &bk, "key", "i", 1) < 0) {
        PyBuffer_Release(&bo);
        return NULL;
    }
    Py_ssize_t m = bo.shape[0], size = bk.shape[0], levels = 0;
    while (((Py_ssize_t)1 << levels) < size && levels < 40)
        levels++;
    Py_ssize_t n = size / 2;
    const int32_t *order = bo.buf;
    int bad = size < 1 || ((Py_ssize_t)1 << levels) != size || m > size || size > INT32_MAX;
    Py_ssize_t widest = 0;
    for (Py_ssize_t i = 0; !bad && i < m; i++) {
        bad = order[i] < 0;
        widest = order[i] >= widest ? (Py_ssize_t)order[i] + 1 : widest;
    }
    PyObject *capsule = NULL;
    places_t *p = NULL;
    int32_t *work = NULL;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "merge_places: the merge's places do not fit its arrays");
        goto done;
    }
    size_t head = (sizeof(places_t) + 15) / 16 * 16;
    p = PyMem_Malloc(head + sizeof(int32_t) * (m + 3 * levels * n));
    work = PyMem_Malloc(sizeof(int32_t) * 2 * size);
    if (p == NULL || work == NULL) {
        PyMem_Free(p);
        PyErr_NoMemory();
        goto done;
    }
    p->m = m;
    p->levels = levels;
    p->n = n;
    p->widest = widest;
    p->order = (int32_t *)((char *)p + head);
    p->lefts = p->order + m;
    p->rights = p->lefts + levels * n;
    p->at = p->rights + levels * n;
    memcpy(p->order, order, sizeof(int32_t) * m);
    Py_BEGIN_ALLOW_THREADS
    make_levels(p, bk.buf, work, work + size);
    Py_END_ALLOW_THREADS
    capsule = PyCapsule_New(p, PLACES, places_free);
    if (capsule == NULL)
        PyMem_Free(p);
done:
    PyMem_Free(work);
    PyBuffer_Release(&bk);
    PyBuffer_Release(&bo);
    return capsule;
}

/* The places of a capsule, for weights of `cols` columns; NULL (an error set) where they do not fit. */
static places_t *
places_of(PyObject *capsule, Py_ssize_t cols, const char *who)
{
    places_t *p = PyCapsule_GetPointer(capsule, PLACES);
    if (p != NULL && p->widest > cols) {
        PyErr_Format(PyExc_ValueError, "%s: the merge's places do not fit its arrays", who);
        return NULL;
    }
    return p;
}

static PyObject *
kendall_discordant(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "kendall_discordant(w, places) takes 2 arguments");
        return NULL;
    }
    Py_buffer bw;
    PyObject *out = NULL;
    if (get_buffer(args[0], &bw, "w", "d", 2) < 0)
        return NULL;
    Py_ssize_t rows = bw.shape[0], cols = bw.shape[1];
    places_t *p = places_of(args[1], cols, "kendall_discordant");
    if (p == NULL)
        goto free_w;
    Py_ssize_t m = p->m, levels = p->levels, n = p->n, size = 2 * n;
    const double *w = bw.buf;
    const int32_t *order = p->order;
    float *v = PyMem_Malloc(sizeof(float) * (size + 1 + n));
    double *discordant = PyMem_Malloc(sizeof(double) * (rows ? rows : 1));
    if (v == NULL || discordant == NULL) {
        PyMem_Free(v);
        PyMem_Free(discordant);
        PyErr_NoMemory();
        goto free_w;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = m; i < size; i++)
        v[i] = 0.0f;
    for (Py_ssize_t row = 0; row < rows; row++) {
        const double *wr = w + row * cols;
        for (Py_ssize_t i = 0; i < m && levels > 0; i++)
            v[i] = (float)wr[order[i]];
        discordant[row] = merge(v, v + size, p->lefts, p->rights, p->at, levels, n);
    }
    Py_END_ALLOW_THREADS
    out = PyList_New(rows);
    for (Py_ssize_t row = 0; out != NULL && row < rows; row++) {
        PyObject *item = PyFloat_FromDouble(discordant[row]);
        if (item == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, row, item);
    }
    PyMem_Free(v);
    PyMem_Free(discordant);
free_w:
    PyBuffer_Release(&bw);
    return out;
}

#define EINSUM_CHUNK 8192  /* the products einsum sums in one call of its inner loop (NumPy's buffer) */

/* One level's dot product of a draw merged alone, in double precision: its weights `v` (by (x, y),
 * `size` of them padded with zeros), `sums` room for 1 + size / 2 running sums. The additions of
 * `merge` in double precision, but the level's dot product, which is that of numpy's einsum of two
 * contiguous rows: in calls of EINSUM_CHUNK products, each summed in two lanes (the even and the odd
 * products) eight products a step (the lane's fourth, third, second and first product of the step
 * added in that order to its sum), the rest two at a time, the two lanes added, then the call's sum
 * added to the level's. */
static double
level_alone(const double *v, double *sums, const places_t *p, Py_ssize_t level)
{
    Py_ssize_t n = p->n, half = (Py_ssize_t)1 << level;
    const int32_t *l = p->lefts + level * n, *r = p->rights + level * n, *a = p->at + level * n;
    int far = half >= 4096;  /* blocks beyond the near caches: the weights fetched ahead */
    sums[0] = 0.0;
    for (Py_ssize_t start = 0; start < n; start += half) {
        double s = v[l[start]];
        sums[1 + start] = s;
        for (Py_ssize_t k = start + 1; k < start + half; k++) {
            if (far && k + AHEAD < n)
                __builtin_prefetch(v + l[k + AHEAD]);
            s = s + v[l[k]];
            sums[1 + k] = s;
        }
    }
    double dot = 0.0;
    for (Py_ssize_t c0 = 0; c0 < n; c0 += EINSUM_CHUNK) {
        Py_ssize_t end = c0 + EINSUM_CHUNK < n ? c0 + EINSUM_CHUNK : n, k = c0;
        double acc0 = 0.0, acc1 = 0.0, t;
        for (; end - k >= 8; k += 8) {
            if (far && k + AHEAD + 8 <= n)
                for (int j = 0; j < 8; j++) {
                    __builtin_prefetch(v + r[k + AHEAD + j]);
                    __builtin_prefetch(sums + a[k + AHEAD + j]);
                }
            double p8[8];
            for (int j = 0; j < 8; j++)
                p8[j] = sums[a[k + j]] * v[r[k + j]];
            t = p8[6] + acc0;
            t = p8[4] + t;
            t = p8[2] + t;
            acc0 = p8[0] + t;
            t = p8[7] + acc1;
            t = p8[5] + t;
            t = p8[3] + t;
            acc1 = p8[1] + t;
        }
        for (; k < end; k += 2) {
            acc0 = sums[a[k]] * v[r[k]] + acc0;
            if (k + 1 < end)
                acc1 = sums[a[k + 1]] * v[r[k + 1]] + acc1;
        }
        dot = dot + (acc0 + acc1);
    }
    return dot;
}

/* Every `step`-th level's dot product from `first` (`level_alone`), into `dots`. */
typedef struct {
    const double *v;
    double *sums, *dots;
    const places_t *p;
    Py_ssize_t first, step;
} levels_t;

static void *
levels_alone(void *arg)
{
    const levels_t *job = arg;
    for (Py_ssize_t level = job->first; level < job->p->levels; level += job->step)
        job->dots[level] = level_alone(job->v, job->sums, job->p, level);
    return NULL;
}

/* The merge of one draw alone: each level's dot product (`level_alone`; the levels are independent:
 * with `two` the odd ones in a second thread, with sums of its own in `sums2`), added to the draw's
 * total level after level. */
static double
merge_alone(const double *v, double *sums, double *sums2, double *dots, const places_t *p, int two)
{
    levels_t even = {v, sums, dots, p, 0, 1}, odd = {v, sums2, dots, p, 1, 2};
#ifdef RAGBRIDGE_THREADS
    pthread_t helper;
    if (two && p->levels > 1 && pthread_create(&helper, NULL, levels_alone, &odd) == 0) {
        even.step = 2;
        levels_alone(&even);
        pthread_join(helper, NULL);
    } else
#endif
        levels_alone(&even);
    double discordant = 0.0;
    for (Py_ssize_t level = 0; level < p->levels; level++)
        discordant = discordant + dots[level];
    (void)odd;
    (void)sums2;
    (void)two;
    return discordant;
}

/* kendall_alone(w, places, out[, threads]): `kendall_discordant` of each row of `w` merged as a block of
 * one draw (`_merge` of a single row: double precision, the dot products as numpy's einsum sums them;
 * `merge_alone`), into `out` (float64, a value a row); with `threads` 2 or more, each row's levels
 * shared by two threads (the same additions, the levels' sums added in order). */
static PyObject *
kendall_alone(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 && nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "kendall_alone(w, places, out[, threads]) takes 3 or 4 arguments");
        return NULL;
    }
    long threads = nargs == 4 ? PyLong_AsLong(args[3]) : 1;
    if (threads == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer bw, bout;
    PyObject *res = NULL;
    if (get_buffer(args[0], &bw, "w", "d", 2) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &bout, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0)
        goto free_w;
    Py_ssize_t rows = bw.shape[0], cols = bw.shape[1];
    places_t *p = places_of(args[1], cols, "kendall_alone");
    if (p == NULL)
        goto free_out;
    if (bout.ndim != 1 || strcmp(bout.format, "d") != 0 || bout.shape[0] != rows) {
        PyErr_SetString(PyExc_ValueError, "kendall_alone: out must be a float64 row of a value a row of w");
        goto free_out;
    }
    Py_ssize_t m = p->m, levels = p->levels, n = p->n, size = 2 * n;
    const double *w = bw.buf;
    const int32_t *order = p->order;
    double *out = bout.buf;
    int two = threads > 1;
    double *v = PyMem_Malloc(sizeof(double) * (size + (1 + two) * (1 + n) + levels + 1));
    if (v == NULL) {
        PyErr_NoMemory();
        goto free_out;
    }
    double *sums = v + size, *sums2 = sums + 1 + n, *dots = sums2 + two * (1 + n);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = m; i < size; i++)
        v[i] = 0.0;
    for (Py_ssize_t row = 0; row < rows; row++) {
        const double *wr = w + row * cols;
        for (Py_ssize_t i = 0; i < m && levels > 0; i++)
            v[i] = wr[order[i]];
        out[row] = merge_alone(v, sums, sums2, dots, p, two);
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(v);
    res = Py_NewRef(Py_None);
free_out:
    PyBuffer_Release(&bout);
free_w:
    PyBuffer_Release(&bw);
    return res;
}

/* NumPy's PCG64 (numpy/random/src/pcg64/pcg64.h): a 128-bit LCG whose new state gives 64 bits by
 * XSL-RR; a 32-bit draw is the low half of a 64-bit one, then its high half. The state comes from and
 * goes back to the generator's `bit_generator.state` (set by the caller). */
typedef struct {
    __uint128_t state, inc;
    int has_uint32;
    uint32_t uinteger;
} pcg64_t;

#define PCG_MULT (((__uint128_t)2549297995355413924ULL << 64) | 4865540595714422341ULL)

static inline uint64_t
pcg64_next64(pcg64_t *g)
{
    g->state = g->state * PCG_MULT + g->inc;
    uint64_t x = (uint64_t)(g->state >> 64) ^ (uint64_t)g->state;
    unsigned rot = (unsigned)(g->state >> 122);
    return (x >> rot) | (x << ((-rot) & 63));
}

static inline uint32_t
pcg64_next32(pcg64_t *g)
{
    if (g->has_uint32) {
        g->has_uint32 = 0;
        return g->uinteger;
    }
    uint64_t next = pcg64_next64(g);
    g->has_uint32 = 1;
    g->uinteger = (uint32_t)(next >> 32);
    return (uint32_t)next;
}

/* (state_high, state_low, inc_high, inc_low, has_uint32, uinteger) <-> pcg64_t */
static int
get_pcg(PyObject *t, pcg64_t *g)
{
    unsigned long long v[6];
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 6) {
        PyErr_SetString(PyExc_TypeError, "a PCG64 state of 6 integers is needed");
        return -1;
    }
    for (int i = 0; i < 6; i++) {
        v[i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, i));
        if (PyErr_Occurred())
            return -1;
    }
    g->state = ((__uint128_t)v[0] << 64) | v[1];
    g->inc = ((__uint128_t)v[2] << 64) | v[3];
    g->has_uint32 = v[4] != 0;
    g->uinteger = (uint32_t)v[5];
    return 0;
}

static PyObject *
pcg_tuple(const pcg64_t *g)
{
    return Py_BuildValue("(KKKKiI)", (unsigned long long)(g->state >> 64), (unsigned long long)g->state,
                         (unsigned long long)(g->inc >> 64), (unsigned long long)g->inc, g->has_uint32,
                         (unsigned int)g->uinteger);
}

/* NumPy's pairwise sum of a contiguous row. */
static double
pairwise_sum(const double *a, Py_ssize_t n)
{
    if (n < 8) {
        double res = 0.;
        for (Py_ssize_t i = 0; i < n; i++)
            res += a[i];
        return res;
    }
    if (n <= 128) {
        double r[8], res;
        Py_ssize_t i;
        for (int j = 0; j < 8; j++)
            r[j] = a[j];
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++)
                r[j] += a[i + j];
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += a[i];
        return res;
    }
    Py_ssize_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}


/* A bounded integer in [0, rng], rng < 0xFFFF: Lemire's method on 16-bit draws, low half first. */
static inline uint32_t
bounded16(pcg64_t *g, uint16_t rng, int *bcnt, uint32_t *buf)
{
    const uint16_t rng_excl = rng + 1;
    uint32_t m;
    uint16_t leftover;
#define NEXT16() (*bcnt ? (*buf >>= 16, (*bcnt)--, (uint16_t)*buf) \
                        : (*buf = pcg64_next32(g), *bcnt = 1, (uint16_t)*buf))
    m = (uint32_t)NEXT16() * rng_excl;
    leftover = m & 0xFFFFUL;
    if (leftover < rng_excl) {
        const uint16_t threshold = (uint16_t)(UINT16_MAX - rng) % rng_excl;
        while (leftover < threshold) {
            m = (uint32_t)NEXT16() * rng_excl;
            leftover = m & 0xFFFFUL;
        }
    }
#undef NEXT16
    return m >> 16;
}

/* A bounded integer in [0, rng], rng < 0xFFFFFFFF: Lemire's method on 32-bit draws. */
static inline uint32_t
bounded32(pcg64_t *g, uint32_t rng)
{
    const uint32_t rng_excl = rng + 1;
    uint64_t m = (uint64_t)pcg64_next32(g) * rng_excl;
    uint32_t leftover = m & 0xFFFFFFFFUL;
    if (leftover < rng_excl) {
        const uint32_t threshold = (UINT32_MAX - rng) % rng_excl;
        while (leftover < threshold) {
            m = (uint64_t)pcg64_next32(g) * rng_excl;
            leftover = m & 0xFFFFFFFFUL;
        }
    }
    return m >> 32;
}

static PyObject *
bootstrap_means(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "bootstrap_means(values, state, n_resamples, block, dist) takes 5 arguments");
        return NULL;
    }
    pcg64_t gen, *g = &gen;
    Py_ssize_t resamples = PyLong_AsSsize_t(args[2]), block = PyLong_AsSsize_t(args[3]);
    if (get_pcg(args[1], g) < 0 || PyErr_Occurred())
        return NULL;
    Py_buffer bv, bd;
    if (get_buffer(args[0], &bv, "values", "d", 1) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[4], &bd, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&bv);
        return NULL;
    }
    Py_ssize_t n = bv.shape[0];
    PyObject *out = NULL;
    if (bd.ndim != 1 || strcmp(bd.format, "d") != 0 || bd.shape[0] < resamples || n < 2 || n > UINT32_MAX
        || block < 1 || resamples < 0) {
        PyErr_SetString(PyExc_ValueError, "bootstrap_means: 2 or more float64 values, a float64 row of "
                        "n_resamples and a block of 1 or more are needed");
        goto done;
    }
    double *tmp = PyMem_Malloc(sizeof(double) * n);
    uint32_t *idx = PyMem_Malloc(sizeof(uint32_t) * n);
    if (tmp == NULL || idx == NULL) {
        PyMem_Free(tmp);
        PyMem_Free(idx);
        PyErr_NoMemory();
        goto done;
    }
    const double *v = bv.buf;
    double *dist = bd.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t start = 0; start < resamples; start += block) {
        Py_ssize_t stop = start + block < resamples ? start + block : resamples;
        int bcnt = 0;
        uint32_t buf = 0;  /* one buffer of 16-bit halves a call of rng.integers */
        for (Py_ssize_t r = start; r < stop; r++) {
            if (n < 32768) {
                for (Py_ssize_t i = 0; i < n; i++)
                    tmp[i] = v[bounded16(g, (uint16_t)(n - 1), &bcnt, &buf)];
            } else {  /* the draws first, then the values, fetched ahead (the values outgrow the caches) */
                Py_ssize_t i = 0;
                for (; i < n && i < AHEAD; i++) {
                    idx[i] = bounded32(g, (uint32_t)(n - 1));
                    __builtin_prefetch(v + idx[i]);
                }
                for (; i < n; i++) {
                    idx[i] = bounded32(g, (uint32_t)(n - 1));
                    __builtin_prefetch(v + idx[i]);
                    tmp[i - AHEAD] = v[idx[i - AHEAD]];
                }
                for (i = n > AHEAD ? n - AHEAD : 0; i < n; i++)
                    tmp[i] = v[idx[i]];
            }
            dist[r] = pairwise_sum(tmp, n) / (double)n;
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(tmp);
    PyMem_Free(idx);
    out = pcg_tuple(g);
done:
    PyBuffer_Release(&bd);
    PyBuffer_Release(&bv);
    return out;
}

/* The sum of the differences `d` (four) that the half byte `bits` selects, its highest bit the first:
 * the table's entry, one addition after the other (an unselected difference adds an exact zero, its
 * bits masked away: no branch on random bits). */
static inline double
half_byte_sum(const double *d, unsigned bits)
{
    double s = 0.0;
    for (int j = 0; j < 4; j++) {
        uint64_t u, mask = (uint64_t)0 - ((bits >> (3 - j)) & 1u);
        double picked;
        memcpy(&u, d + j, sizeof u);
        u &= mask;
        memcpy(&picked, &u, sizeof picked);
        s = j ? s + picked : picked;
    }
    return s;
}

static PyObject *
sign_flip_counts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "sign_flip_counts(d, state, n_resamples, block, total, observed, "
                        "gamma) takes 7 arguments");
        return NULL;
    }
    pcg64_t gen, *g = &gen;
    Py_ssize_t resamples = PyLong_AsSsize_t(args[2]), block = PyLong_AsSsize_t(args[3]);
    if (get_pcg(args[1], g) < 0)
        return NULL;
    double total = PyFloat_AsDouble(args[4]), observed = PyFloat_AsDouble(args[5]);
    double gamma = PyFloat_AsDouble(args[6]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer bd;
    if (get_buffer(args[0], &bd, "d", "d", 1) < 0)
        return NULL;
    Py_ssize_t nbytes = bd.shape[0] / 8;
    PyObject *out = NULL;
    if (bd.shape[0] % 8 != 0 || nbytes < 1 || block < 1 || resamples < 0) {
        PyErr_SetString(PyExc_ValueError, "sign_flip_counts: differences padded to 8 a byte and a block of 1 "
                        "or more are needed");
        goto done;
    }
    double *hi = PyMem_Malloc(sizeof(double) * 2 * nbytes);
    if (hi == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    double *lo = hi + nbytes;
    const double *d = bd.buf;
    long long n_less = 0, n_greater = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t start = 0; start < resamples; start += block) {
        Py_ssize_t stop = start + block < resamples ? start + block : resamples;
        int bcnt = 0;
        uint32_t buf = 0;  /* one buffer of bytes a call of rng.integers */
        for (Py_ssize_t r = start; r < stop; r++) {
            for (Py_ssize_t i = 0; i < nbytes; i++) {
                uint8_t raw;
                if (bcnt) {
                    buf >>= 8;
                    bcnt--;
                } else {
                    buf = pcg64_next32(g);
                    bcnt = 3;
                }
                raw = (uint8_t)buf;
                hi[i] = half_byte_sum(d + 8 * i, raw >> 4);
                lo[i] = half_byte_sum(d + 8 * i + 4, raw & 15);
            }
            double picked = pairwise_sum(hi, nbytes);
            picked += pairwise_sum(lo, nbytes);
            double null = 2.0 * picked - total;
            n_less += null <= observed + gamma;
            n_greater += null >= observed - gamma;
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(hi);
    PyObject *state = pcg_tuple(g);
    out = state ? Py_BuildValue("(LLN)", n_less, n_greater, state) : NULL;
done:
    PyBuffer_Release(&bd);
    return out;
}

/* A row of int64 places, as the caller hands them (NumPy's intp on 64-bit machines). */
static int
get_places(PyObject *obj, Py_buffer *view, const char *what, Py_ssize_t limit)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->ndim != 1 || view->itemsize != 8 || (strcmp(view->format, "l") != 0 && strcmp(view->format, "q") != 0)) {
        PyErr_Format(PyExc_ValueError, "%s: a row of int64 is needed", what);
        PyBuffer_Release(view);
        return -1;
    }
    const uint64_t *p = view->buf;
    uint64_t outside = 0;  /* (a negative place is a large unsigned one: one comparison, no branch) */
    for (Py_ssize_t i = 0; i < view->shape[0]; i++)
        outside |= p[i] >= (uint64_t)limit;
    if (outside || limit < 0) {
        PyErr_Format(PyExc_ValueError, "%s: a place outside 0..%zd", what, limit - 1);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* Whether `g` runs starting at `starts` (the first at 0, each after the one before) cut m cases. */
static int
runs_fit(const int64_t *starts, Py_ssize_t g, Py_ssize_t m)
{
    if ((g > 0) != (m > 0) || (g > 0 && starts[0] != 0))
        return 0;
    for (Py_ssize_t j = 1; j < g; j++)
        if (starts[j] <= starts[j - 1])
            return 0;
    return 1;
}

/* A column's runs of equal values, checked once and kept (a capsule of `runs`): the m cases' stable
 * order, where each of the g runs starts in it, and each case's run (`at`, NULL where not given). */
typedef struct {
    Py_ssize_t m, g;
    int32_t *order, *starts, *at;
} runs_t;

#define RUNS "ragbridge.analysis._stats.runs"

static void
runs_free(PyObject *capsule)
{
    PyMem_Free(PyCapsule_GetPointer(capsule, RUNS));
}

/* runs(order, starts, at): a column's runs, kept for `run_sums` and `mid_ranks`: `order` (int64, m
 * places among m), `starts` (int64, where each run starts in it: the first at 0, each after the one
 * before), `at` (int64, each case's run, or None). */
static PyObject *
runs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "runs(order, starts, at) takes 3 arguments");
        return NULL;
    }
    Py_buffer bo, bs, ba;
    PyObject *capsule = NULL;
    int has_at = args[2] != Py_None;
    Py_ssize_t m = PyObject_Length(args[0]);
    if (m < 0 || get_places(args[0], &bo, "order", m) < 0)
        return NULL;
    if (get_places(args[1], &bs, "starts", m) < 0)
        goto free_o;
    Py_ssize_t g = bs.shape[0];
    if (has_at && get_places(args[2], &ba, "at", g) < 0)
        goto free_s;
    if (m >= INT32_MAX || !runs_fit(bs.buf, g, m) || (has_at && ba.shape[0] != m)) {
        PyErr_SetString(PyExc_ValueError, "runs: the runs do not fit the cases");
        goto free_a;
    }
    size_t head = (sizeof(runs_t) + 15) / 16 * 16;
    runs_t *r = PyMem_Malloc(head + sizeof(int32_t) * (2 * m + g + 1));
    if (r == NULL) {
        PyErr_NoMemory();
        goto free_a;
    }
    r->m = m;
    r->g = g;
    r->order = (int32_t *)((char *)r + head);
    r->starts = r->order + m;
    r->at = has_at ? r->starts + g : NULL;
    const int64_t *o = bo.buf, *st = bs.buf;
    for (Py_ssize_t i = 0; i < m; i++)
        r->order[i] = (int32_t)o[i];
    for (Py_ssize_t j = 0; j < g; j++)
        r->starts[j] = (int32_t)st[j];
    if (has_at) {
        const int64_t *at = ba.buf;
        for (Py_ssize_t i = 0; i < m; i++)
            r->at[i] = (int32_t)at[i];
    }
    capsule = PyCapsule_New(r, RUNS, runs_free);
    if (capsule == NULL)
        PyMem_Free(r);
free_a:
    if (has_at)
        PyBuffer_Release(&ba);
free_s:
    PyBuffer_Release(&bs);
free_o:
    PyBuffer_Release(&bo);
    return capsule;
}

/* The sum of each run of a row of weights `w` (`r`'s runs), as NumPy's add.reduceat sums a run: its
 * first value plus the pairwise sum of the others. */
static void
run_sums(const double *w, const runs_t *r, double *sums, double *tmp)
{
    const int32_t *order = r->order, *starts = r->starts;
    Py_ssize_t g = r->g, m = r->m;
    for (Py_ssize_t j = 0; j < g; j++) {
        Py_ssize_t s = starts[j], e = j + 1 < g ? starts[j + 1] : m;
        if (s + AHEAD < m)  /* (the weights are gathered: fetched ahead) */
            __builtin_prefetch(w + order[s + AHEAD]);
        if (e - s == 1) {
            sums[j] = w[order[s]];
            continue;
        }
        for (Py_ssize_t k = s + 1; k < e; k++)
            tmp[k - s - 1] = w[order[k]];
        sums[j] = w[order[s]] + pairwise_sum(tmp, e - s - 1);
    }
}

/* run_sums(w, runs, out): per row of `w` (float64, m columns), the sum of each of the g runs (`runs`,
 * a capsule of `runs`) as `add.reduceat` sums it (`_group_sums`), into `out` (float64, rows of g). */
static PyObject *
run_sums_of(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "run_sums(w, runs, out) takes 3 arguments");
        return NULL;
    }
    const runs_t *r = PyCapsule_GetPointer(args[1], RUNS);
    if (r == NULL)
        return NULL;
    Py_buffer bw, bout;
    PyObject *res = NULL;
    if (get_buffer(args[0], &bw, "w", "d", 2) < 0)
        return NULL;
    Py_ssize_t rows = bw.shape[0], m = bw.shape[1], g = r->g;
    if (get_buffer(args[2], &bout, "out", "d", 2) < 0)
        goto free_w;
    if (m != r->m || bout.shape[0] != rows || bout.shape[1] != g || bout.readonly) {
        PyErr_SetString(PyExc_ValueError, "run_sums: the runs do not fit the weights");
        goto free_out;
    }
    double *tmp = PyMem_Malloc(sizeof(double) * (m + 1));
    if (tmp == NULL) {
        PyErr_NoMemory();
        goto free_out;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t row = 0; row < rows; row++)
        run_sums((const double *)bw.buf + row * m, r, (double *)bout.buf + row * g, tmp);
    Py_END_ALLOW_THREADS
    PyMem_Free(tmp);
    res = Py_NewRef(Py_None);
free_out:
    PyBuffer_Release(&bout);
free_w:
    PyBuffer_Release(&bw);
    return res;
}

/* mid_ranks(sums, runs, out): each case's weighted mid-rank a row of runs' sums (`_mid_ranks`; `sums`
 * from `run_sums`, `runs` a capsule of `runs` with each case's run): their running sum one addition
 * after the other (NumPy's cumsum), the weight below a run `running - sum` plus half its sum, picked
 * for each case by its run (`out` a row of m a row of `sums`). */
static PyObject *
mid_ranks(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "mid_ranks(sums, runs, out) takes 3 arguments");
        return NULL;
    }
    const runs_t *r = PyCapsule_GetPointer(args[1], RUNS);
    if (r == NULL)
        return NULL;
    Py_buffer bs, bout;
    PyObject *res = NULL;
    if (get_buffer(args[0], &bs, "sums", "d", 2) < 0)
        return NULL;
    Py_ssize_t rows = bs.shape[0], g = bs.shape[1], m = r->m;
    if (get_buffer(args[2], &bout, "out", "d", 2) < 0)
        goto free_s;
    if (r->at == NULL || g != r->g || bout.shape[0] != rows || bout.shape[1] != m || bout.readonly) {
        PyErr_SetString(PyExc_ValueError, "mid_ranks: the runs do not fit the sums");
        goto free_out;
    }
    double *tmp = PyMem_Malloc(sizeof(double) * (g + 1));
    if (tmp == NULL) {
        PyErr_NoMemory();
        goto free_out;
    }
    const int32_t *at = r->at;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t row = 0; row < rows; row++) {
        const double *sums = (const double *)bs.buf + row * g;
        double *out = (double *)bout.buf + row * m;
        double running = 0.0;
        for (Py_ssize_t j = 0; j < g; j++) {
            running = j ? running + sums[j] : sums[j];
            tmp[j] = (running - sums[j]) + sums[j] / 2;
        }
        for (Py_ssize_t i = 0; i < m; i++) {
            if (i + AHEAD < m)
                __builtin_prefetch(tmp + at[i + AHEAD]);
            out[i] = tmp[at[i]];
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(tmp);
    res = Py_NewRef(Py_None);
free_out:
    PyBuffer_Release(&bout);
free_s:
    PyBuffer_Release(&bs);
    return res;
}

/* Three of NumPy's pairwise sums at once (`pairwise_sum`'s splits and additions for each), of terms
 * made as they are summed, so the weights and values are read once a pass: `first_moments`' are w,
 * w * x, w * y; `second_moments`' (w * dx) * dy, (w * dx) * dx, (w * dy) * dy, with dx = x - mx and
 * dy = y - my (each term rounded as the NumPy steps round it, in their order). */
typedef struct {
    const double *w, *x, *y;
    double mx, my;
} moments_t;

#define FIRST_TERMS(i) \
    (ta = q->w[i], tb = q->w[i] * q->x[i], tc = q->w[i] * q->y[i])
#define SECOND_TERMS(i) \
    (dx = q->x[i] - q->mx, dy = q->y[i] - q->my, wdx = q->w[i] * dx, \
     ta = wdx * dy, tb = wdx * dx, tc = (q->w[i] * dy) * dy)
#define LANES(r) (((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7])))

#define MOMENTS(NAME, TERMS)                                                                        \
static void                                                                                         \
NAME(const moments_t *q, Py_ssize_t i0, Py_ssize_t n, double out[3])                                \
{                                                                                                   \
    double ta, tb, tc, dx, dy, wdx;                                                                 \
    (void)dx, (void)dy, (void)wdx;                                                                  \
    if (n < 8) {                                                                                    \
        double ra = 0., rb = 0., rc = 0.;                                                           \
        for (Py_ssize_t i = i0; i < i0 + n; i++) {                                                  \
            TERMS(i);                                                                               \
            ra += ta, rb += tb, rc += tc;                                                           \
        }                                                                                           \
        out[0] = ra, out[1] = rb, out[2] = rc;                                                      \
        return;                                                                                     \
    }                                                                                               \
    if (n <= 128) {                                                                                 \
        double ra[8], rb[8], rc[8];                                                                 \
        Py_ssize_t i;                                                                               \
        for (int j = 0; j < 8; j++) {                                                               \
            TERMS(i0 + j);                                                                          \
            ra[j] = ta, rb[j] = tb, rc[j] = tc;                                                     \
        }                                                                                           \
        for (i = 8; i < n - (n % 8); i += 8)                                                        \
            for (int j = 0; j < 8; j++) {                                                           \
                TERMS(i0 + i + j);                                                                  \
                ra[j] += ta, rb[j] += tb, rc[j] += tc;                                              \
            }                                                                                       \
        out[0] = LANES(ra), out[1] = LANES(rb), out[2] = LANES(rc);                                 \
        for (; i < n; i++) {                                                                        \
            TERMS(i0 + i);                                                                          \
            out[0] += ta, out[1] += tb, out[2] += tc;                                               \
        }                                                                                           \
        return;                                                                                     \
    }                                                                                               \
    Py_ssize_t n2 = n / 2;                                                                          \
    n2 -= n2 % 8;                                                                                   \
    double left[3], right[3];                                                                       \
    NAME(q, i0, n2, left);                                                                          \
    NAME(q, i0 + n2, n - n2, right);                                                                \
    for (int j = 0; j < 3; j++)                                                                     \
        out[j] = left[j] + right[j];                                                                \
}

MOMENTS(first_moments, FIRST_TERMS)
MOMENTS(second_moments, SECOND_TERMS)

/* weighted_pearson(w, x, y, out, eps): per row of `w`, `_pearson_of`'s weighted Pearson correlation
 * of `x` and `y` (each a row of the columns' m values, or one row a row of `w`): every product
 * rounded, every sum pairwise, in the NumPy steps' order. */
static PyObject *
weighted_pearson(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "weighted_pearson(w, x, y, out, eps) takes 5 arguments");
        return NULL;
    }
    double eps = PyFloat_AsDouble(args[4]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer bw, bx, by, bout;
    PyObject *res = NULL;
    if (get_buffer(args[0], &bw, "w", "d", 2) < 0)
        return NULL;
    Py_ssize_t rows = bw.shape[0], m = bw.shape[1];
    if (PyObject_GetBuffer(args[1], &bx, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        goto free_w;
    if (PyObject_GetBuffer(args[2], &by, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        goto free_x;
    if (PyObject_GetBuffer(args[3], &bout, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0)
        goto free_y;
    int x2 = bx.ndim == 2, y2 = by.ndim == 2;
    int bad = strcmp(bx.format, "d") != 0 || strcmp(by.format, "d") != 0 || strcmp(bout.format, "d") != 0
              || bout.ndim != 1 || bout.shape[0] != rows;
    bad = bad || (x2 ? bx.shape[0] != rows || bx.shape[1] != m : bx.ndim != 1 || bx.shape[0] != m);
    bad = bad || (y2 ? by.shape[0] != rows || by.shape[1] != m : by.ndim != 1 || by.shape[0] != m);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "weighted_pearson: x and y must be float64 rows of the weights' width");
        goto free_out;
    }
    double *out = bout.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < rows; r++) {
        moments_t q = {(const double *)bw.buf + r * m, (const double *)bx.buf + (x2 ? r * m : 0),
                       (const double *)by.buf + (y2 ? r * m : 0), 0.0, 0.0};
        double first[3], second[3];
        first_moments(&q, 0, m, first);
        double s = first[0];
        q.mx = s > EPS_ ? first[1] / s : NAN;
        q.my = s > EPS_ ? first[2] / s : NAN;
        second_moments(&q, 0, m, second);
        double cov = second[0], vx = second[1], vy = second[2];
        double den = sqrt(vx * vy), floor = eps * s;
        double v = (vx > floor && vy > floor) ? cov / den : NAN;
        out[r] = v < -1.0 ? -1.0 : (v > 1.0 ? 1.0 : v);
    }
    Py_END_ALLOW_THREADS
    res = Py_NewRef(Py_None);
free_out:
    PyBuffer_Release(&bout);
free_y:
    PyBuffer_Release(&by);
free_x:
    PyBuffer_Release(&bx);
free_w:
    PyBuffer_Release(&bw);
    return res;
}

static PyMethodDef methods[] = {
    {"merge_places", (PyCFunction)(void (*)(void))merge_places, METH_FASTCALL,
     "merge_places(order, key): the places of a merge, every level made and kept."},
    {"kendall_discordant", (PyCFunction)(void (*)(void))kendall_discordant, METH_FASTCALL,
     "kendall_discordant(w, places): each draw's strictly discordant weight."},
    {"kendall_alone", (PyCFunction)(void (*)(void))kendall_alone, METH_FASTCALL,
     "kendall_alone(w, places, out[, threads]): each row's discordant weight, merged as a draw alone."},
    {"bootstrap_means", (PyCFunction)(void (*)(void))bootstrap_means, METH_FASTCALL,
     "bootstrap_means(values, state, n_resamples, block, dist): each resample's mean into dist; the new state."},
    {"sign_flip_counts", (PyCFunction)(void (*)(void))sign_flip_counts, METH_FASTCALL,
     "sign_flip_counts(d, state, n_resamples, block, total, observed, gamma): (n_less, n_greater, state)."},
    {"runs", (PyCFunction)(void (*)(void))runs, METH_FASTCALL,
     "runs(order, starts, at): a column's runs, checked once and kept for run_sums and mid_ranks."},
    {"run_sums", (PyCFunction)(void (*)(void))run_sums_of, METH_FASTCALL,
     "run_sums(w, runs, out): per row of w, the sum of each run."},
    {"mid_ranks", (PyCFunction)(void (*)(void))mid_ranks, METH_FASTCALL,
     "mid_ranks(sums, runs, out): each case's weighted mid-rank, a row of runs' sums at a time."},
    {"weighted_pearson", (PyCFunction)(void (*)(void))weighted_pearson, METH_FASTCALL,
     "weighted_pearson(w, x, y, out, eps): per row of w, the weighted Pearson correlation of x and y."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ragbridge.analysis._stats",
    "The resampling loops of ragbridge.analysis.stats, in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__stats(void)
{
    return PyModule_Create(&module);
}
