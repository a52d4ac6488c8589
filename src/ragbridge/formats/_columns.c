/* Chunk columns cut from and joined into a golden set's JSON text, in C: the two steps of reading a
 * large golden set that make a Python object per chunk (ragbridge.formats.record_lines and
 * ragbridge.formats.plain_records call these where the package was built with them; their Python
 * versions, beside the calls, give the same results and are used otherwise).
 *
 * split_pairs(body, between, middle): an ASCII body of chunks, `id middle text between id middle
 *   text ...`, as (ids, texts), or None where it is not exactly that with ids that print (no space at
 *   either end) and texts not empty, neither holding a quote, a backslash or a control character.
 * split_ids(body, between): an ASCII body of chunks given as ids alone, `id between id ...`, as the
 *   list of ids, or None where it is not exactly that with ids that print, not empty, with no space at
 *   either end and no quote or backslash.
 * interleave(ids, texts, middle, between): between.join(map(middle.join, zip(ids, texts))).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* The ASCII text of `s`, or NULL with a ValueError. */
static const char *
ascii_data(PyObject *s, Py_ssize_t *size, const char *what)
{
    if (!PyUnicode_Check(s) || !PyUnicode_IS_ASCII(s)) {
        PyErr_Format(PyExc_ValueError, "%s: an ASCII str is needed", what);
        return NULL;
    }
    *size = PyUnicode_GET_LENGTH(s);
    return (const char *)PyUnicode_1BYTE_DATA(s);
}

static int
append_ascii(PyObject *list, const char *data, Py_ssize_t size)
{
    /* one character: the interpreter's shared str of it, as str.split gives */
    PyObject *item = size == 1 ? PyUnicode_FromOrdinal((unsigned char)data[0]) : PyUnicode_New(size, 127);
    if (item == NULL)
        return -1;
    if (size != 1)
        memcpy(PyUnicode_1BYTE_DATA(item), data, size);
    int failed = PyList_Append(list, item);
    Py_DECREF(item);
    return failed;
}

static PyObject *
split_pairs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t n, nb, nm;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "split_pairs(body, between, middle) takes 3 arguments");
        return NULL;
    }
    const char *s = ascii_data(args[0], &n, "body");
    const char *b = s ? ascii_data(args[1], &nb, "between") : NULL;
    const char *m = b ? ascii_data(args[2], &nm, "middle") : NULL;
    if (m == NULL)
        return NULL;
    if (nb == 0 || nm == 0 || b[0] != '"' || m[0] != '"') {
        PyErr_SetString(PyExc_ValueError, "between and middle begin with a quote");
        return NULL;
    }
    PyObject *ids = PyList_New(0), *texts = PyList_New(0);
    if (ids == NULL || texts == NULL)
        goto error;
    Py_ssize_t pos = 0;
    for (;;) {
        /* an id: not empty, printing, no space at either end, up to the quote that opens `middle` */
        const char *q = memchr(s + pos, '"', n - pos);
        if (q == NULL)
            goto refuse;
        Py_ssize_t end = q - s;
        if (end == pos || s[pos] == ' ' || s[end - 1] == ' ')
            goto refuse;
        for (Py_ssize_t i = pos; i < end; i++) {
            unsigned char c = (unsigned char)s[i];
            if (c < 0x20 || c == 0x7f || c == '\\')
                goto refuse;
        }
        if (n - end < nm || memcmp(s + end, m, nm) != 0)
            goto refuse;
        if (append_ascii(ids, s + pos, end - pos) < 0)
            goto error;
        pos = end + nm;
        /* a text: not empty, no control character, up to the quote that opens `between`, or the end */
        q = memchr(s + pos, '"', n - pos);
        end = q == NULL ? n : q - s;
        if (end == pos)
            goto refuse;
        for (Py_ssize_t i = pos; i < end; i++) {
            unsigned char c = (unsigned char)s[i];
            if (c < 0x20 || c == '\\')
                goto refuse;
        }
        if (append_ascii(texts, s + pos, end - pos) < 0)
            goto error;
        if (q == NULL)
            break;
        if (n - end < nb || memcmp(s + end, b, nb) != 0)
            goto refuse;
        pos = end + nb;
    }
    PyObject *pair = PyTuple_Pack(2, ids, texts);
    Py_DECREF(ids);
    Py_DECREF(texts);
    return pair;
refuse:
    Py_DECREF(ids);
    Py_DECREF(texts);
    Py_RETURN_NONE;
error:
    Py_XDECREF(ids);
    Py_XDECREF(texts);
    return NULL;
}

static PyObject *
split_ids(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t n, nb;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "split_ids(body, between) takes 2 arguments");
        return NULL;
    }
    const char *s = ascii_data(args[0], &n, "body");
    const char *b = s ? ascii_data(args[1], &nb, "between") : NULL;
    if (b == NULL)
        return NULL;
    if (nb == 0 || b[0] != '"') {
        PyErr_SetString(PyExc_ValueError, "between begins with a quote");
        return NULL;
    }
    PyObject *ids = PyList_New(0);
    if (ids == NULL)
        return NULL;
    Py_ssize_t pos = 0;
    for (;;) {
        /* an id: not empty, printing, no space at either end, up to the quote that opens `between` */
        const char *q = memchr(s + pos, '"', n - pos);
        Py_ssize_t end = q == NULL ? n : q - s;
        if (end == pos || s[pos] == ' ' || s[end - 1] == ' ')
            goto refuse;
        for (Py_ssize_t i = pos; i < end; i++) {
            unsigned char c = (unsigned char)s[i];
            if (c < 0x20 || c == 0x7f || c == '\\')
                goto refuse;
        }
        if (append_ascii(ids, s + pos, end - pos) < 0) {
            Py_DECREF(ids);
            return NULL;
        }
        if (q == NULL)
            return ids;
        if (n - end < nb || memcmp(s + end, b, nb) != 0)
            goto refuse;
        pos = end + nb;
    }
refuse:
    Py_DECREF(ids);
    Py_RETURN_NONE;
}

static PyObject *
interleave(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "interleave(ids, texts, middle, between) takes 4 arguments");
        return NULL;
    }
    PyObject *ids = args[0], *texts = args[1], *middle = args[2], *between = args[3];
    if (!PyList_Check(ids) || !PyList_Check(texts) || !PyUnicode_Check(middle) || !PyUnicode_Check(between)) {
        PyErr_SetString(PyExc_TypeError, "interleave takes two lists of str and two str");
        return NULL;
    }
    Py_ssize_t k = PyList_GET_SIZE(ids);
    if (PyList_GET_SIZE(texts) != k) {
        PyErr_SetString(PyExc_ValueError, "interleave: ids and texts differ in length");
        return NULL;
    }
    if (k == 0)
        return PyUnicode_New(0, 0);
    Py_ssize_t nm = PyUnicode_GET_LENGTH(middle), nb = PyUnicode_GET_LENGTH(between);
    /* the widest character of the pieces used (a str wider than its characters would compare unequal
       to the same characters) */
    Py_UCS4 maxchar = PyUnicode_MAX_CHAR_VALUE(middle);
    if (k > 1 && PyUnicode_MAX_CHAR_VALUE(between) > maxchar)
        maxchar = PyUnicode_MAX_CHAR_VALUE(between);
    Py_ssize_t total = k * nm + (k - 1) * nb;
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *pair[2] = {PyList_GET_ITEM(ids, i), PyList_GET_ITEM(texts, i)};
        for (int j = 0; j < 2; j++) {
            if (!PyUnicode_Check(pair[j])) {
                PyErr_SetString(PyExc_TypeError, "interleave takes two lists of str");
                return NULL;
            }
            total += PyUnicode_GET_LENGTH(pair[j]);
            if (PyUnicode_MAX_CHAR_VALUE(pair[j]) > maxchar)
                maxchar = PyUnicode_MAX_CHAR_VALUE(pair[j]);
        }
    }
    PyObject *out = PyUnicode_New(total, maxchar);
    if (out == NULL)
        return NULL;
    PyObject *order[4] = {NULL, NULL, middle, NULL};
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < k; i++) {
        order[0] = i ? between : NULL;
        order[1] = PyList_GET_ITEM(ids, i);
        order[3] = PyList_GET_ITEM(texts, i);
        for (int j = 0; j < 4; j++) {
            PyObject *piece = order[j];
            if (piece == NULL)
                continue;
            Py_ssize_t size = PyUnicode_GET_LENGTH(piece);
            if (maxchar < 128) {
                memcpy(PyUnicode_1BYTE_DATA(out) + at, PyUnicode_1BYTE_DATA(piece), size);
            } else if (PyUnicode_CopyCharacters(out, at, piece, 0, size) < 0) {
                Py_DECREF(out);
                return NULL;
            }
            at += size;
        }
    }
    return out;
}

static PyMethodDef methods[] = {
    {"split_pairs", (PyCFunction)(void (*)(void))split_pairs, METH_FASTCALL,
     "split_pairs(body, between, middle): (ids, texts) of an ASCII body of chunks, or None."},
    {"split_ids", (PyCFunction)(void (*)(void))split_ids, METH_FASTCALL,
     "split_ids(body, between): the ids of an ASCII body of chunks given as ids alone, or None."},
    {"interleave", (PyCFunction)(void (*)(void))interleave, METH_FASTCALL,
     "interleave(ids, texts, middle, between): between.join(map(middle.join, zip(ids, texts)))."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ragbridge.formats._columns",
    "Chunk columns cut from and joined into JSON text, in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__columns(void)
{
    return PyModule_Create(&module);
}
