/* The merge of Kendall's tau over a block of posterior draws, in C (ragbridge.analysis.stats._kendall
 * calls it where the package was built with it; the same steps in NumPy, beside the call, give the
 * same numbers to the last bit and are used otherwise).
 *
 * kendall_discordant(w, order, lefts, rights, at): the strictly discordant weight of each draw (a row
 *   of `w`, float64, C order), as a list of floats. `order` (int32) puts the columns of `w` in order
 *   of (x, y); the draw's weights in that order, rounded to single precision and padded with zeros to
 *   `size` = 2 * lefts.shape[1], are merged level by level. `lefts`, `rights`, `at` (int32, one row a
 *   level, the level's half blocks 1, 2, 4, ...): the places of each merged block's left cases, by y
 *   highest first, block after block; the places of the right cases; and for each right case where
 *   its block's running sum of left weights strictly above it is (1 + block * half + k for the sum of
 *   the first k + 1), or 0 for none. No level (one case): every draw's weight is 0.
 *
 * The additions are those of the NumPy steps, in their order and precision: each block's running sum
 * in single precision, one addition after the other; the level's dot product of the right cases'
 * running sums and weights in single precision, one product rounded and then added after the other,
 * from zero (what numpy's einsum does for those operands: one of them strided); the level's sum added
 * to the draw's double-precision total. No multiply-add may be fused (setup.py builds this file with
 * -ffp-contract=off; the products are rounded before each addition).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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

static PyObject *
kendall_discordant(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "kendall_discordant(w, order, lefts, rights, at) takes 5 arguments");
        return NULL;
    }
    Py_buffer bw, bo, bl, br, ba;
    PyObject *out = NULL;
    if (get_buffer(args[0], &bw, "w", "d", 2) < 0)
        return NULL;
    if (get_buffer(args[1], &bo, "order", "i", 1) < 0)
        goto free_w;
    if (get_buffer(args[2], &bl, "lefts", "i", 2) < 0)
        goto free_o;
    if (get_buffer(args[3], &br, "rights", "i", 2) < 0)
        goto free_l;
    if (get_buffer(args[4], &ba, "at", "i", 2) < 0)
        goto free_r;
    Py_ssize_t rows = bw.shape[0], cols = bw.shape[1], m = bo.shape[0];
    Py_ssize_t levels = bl.shape[0], n = bl.shape[1], size = 2 * n;
    const double *w = bw.buf;
    const int32_t *order = bo.buf, *lefts = bl.buf, *rights = br.buf, *at = ba.buf;
    int bad = (levels > 0 && m > size) || br.shape[0] != levels || br.shape[1] != n
              || ba.shape[0] != levels || ba.shape[1] != n || (n & (n - 1)) != 0
              || (levels > 0 && ((Py_ssize_t)1 << (levels - 1)) > n);
    for (Py_ssize_t i = 0; !bad && i < m; i++)
        bad = order[i] < 0 || order[i] >= cols;
    for (Py_ssize_t i = 0; !bad && i < levels * n; i++) {
        Py_ssize_t half = (Py_ssize_t)1 << (i / n);
        bad = lefts[i] < 0 || lefts[i] >= size || rights[i] < 0 || rights[i] >= size || at[i] < 0
              || at[i] > n || (at[i] > 0 && (at[i] - 1) / half != (i % n) / half);
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "kendall_discordant: the merge's places do not fit its arrays");
        goto free_a;
    }
    float *v = PyMem_Malloc(sizeof(float) * (size + 1 + n));
    double *discordant = PyMem_Malloc(sizeof(double) * (rows ? rows : 1));
    if (v == NULL || discordant == NULL) {
        PyMem_Free(v);
        PyMem_Free(discordant);
        PyErr_NoMemory();
        goto free_a;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = m; i < size; i++)
        v[i] = 0.0f;
    for (Py_ssize_t row = 0; row < rows; row++) {
        const double *wr = w + row * cols;
        for (Py_ssize_t i = 0; i < m && levels > 0; i++)
            v[i] = (float)wr[order[i]];
        discordant[row] = merge(v, v + size, lefts, rights, at, levels, n);
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
free_a:
    PyBuffer_Release(&ba);
free_r:
    PyBuffer_Release(&br);
free_l:
    PyBuffer_Release(&bl);
free_o:
    PyBuffer_Release(&bo);
free_w:
    PyBuffer_Release(&bw);
    return out;
}

static PyMethodDef methods[] = {
    {"kendall_discordant", (PyCFunction)(void (*)(void))kendall_discordant, METH_FASTCALL,
     "kendall_discordant(w, order, lefts, rights, at): each draw's strictly discordant weight."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ragbridge.analysis._stats",
    "The merge of Kendall's tau over posterior draws, in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__stats(void)
{
    return PyModule_Create(&module);
}
