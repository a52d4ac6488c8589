/* Chunk columns cut from and joined into a golden set's JSON text, and chunk ids ranked, in C: the
 * steps of reading and ranking a large golden set that made a Python object per chunk
 * (ragbridge.formats.record_lines and ragbridge.formats.plain_records call these where the package
 * was built with them; their Python versions, beside the calls, give the same results and are used
 * otherwise).
 *
 * split_pairs(body, between, middle): an ASCII body of chunks, `id middle text between id middle
 *   text ...`, as (ids, texts), or None where it is not exactly that with ids that print (no space at
 *   either end) and texts not empty, neither holding a quote, a backslash or a control character.
 * join_ids(body, between): an ASCII body of chunks given as ids alone, `id between id ...`, as the
 *   ids joined by line breaks ("\n".join(ids), no str made an id), or None where it is not exactly
 *   that with ids that print, not empty, with no space at either end and no quote or backslash.
 * cut_ids(text): for a line whose top-level chunks may be ids alone (the opening of either spelling
 *   found first, the first "}] after it): (where the opening starts, where "}] is, the ids joined as
 *   join_ids joins them) where the chunks between are ASCII ids alone, as join_ids takes them; else
 *   None (the Python steps decide).
 * rank_ids(joined, labels): for ids joined by line breaks (join_ids'), (the number of ids, how many
 *   repeat an id before them, and per label of the list `labels` its 1-based rank among the ids with
 *   each repeat dropped, 0 where it is not among them); None where `joined` is not ASCII.
 * interleave(ids, texts, middle, between): between.join(map(middle.join, zip(ids, texts))).
 */
#define _GNU_SOURCE /* memmem */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
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

/* The ids of the ASCII body s[0:n] of chunks given as ids alone (`id between id ...`), joined by line
 * breaks, or None where it is not exactly that with ids that print, not empty, with no space at either
 * end and no quote or backslash (and, with `ascii`, where the body holds a character that is not ASCII). */
static PyObject *
joined_ids(const char *s, Py_ssize_t n, const char *b, Py_ssize_t nb, int ascii)
{
    Py_ssize_t pos = 0, k = 0;
    for (;;) {
        /* an id: not empty, printing, no space at either end, up to the quote that opens `between` */
        const char *q = memchr(s + pos, '"', n - pos);
        Py_ssize_t end = q == NULL ? n : q - s;
        if (end == pos || s[pos] == ' ' || s[end - 1] == ' ')
            Py_RETURN_NONE;
        for (Py_ssize_t i = pos; i < end; i++) {
            unsigned char c = (unsigned char)s[i];
            if (c < 0x20 || c == 0x7f || c == '\\' || (ascii && c >= 0x80))
                Py_RETURN_NONE;
        }
        k++;
        if (q == NULL)
            break;
        if (n - end < nb || memcmp(s + end, b, nb) != 0)
            Py_RETURN_NONE;
        pos = end + nb;
    }
    PyObject *out = PyUnicode_New(n - (k - 1) * (nb - 1), 127);
    if (out == NULL)
        return NULL;
    char *o = (char *)PyUnicode_1BYTE_DATA(out);
    pos = 0;
    for (;;) {
        const char *q = memchr(s + pos, '"', n - pos);
        Py_ssize_t end = q == NULL ? n : q - s;
        memcpy(o, s + pos, end - pos);
        o += end - pos;
        if (q == NULL)
            break;
        *o++ = '\n';
        pos = end + nb;
    }
    return out;
}

static PyObject *
join_ids(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t n, nb;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "join_ids(body, between) takes 2 arguments");
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
    return joined_ids(s, n, b, nb, 0);
}

/* The two spellings of chunks given as ids alone: the opening of the chunks, and between two. */
static const char *const OPENINGS[2] = {"\"contexts\": [{\"id\": \"", "\"contexts\":[{\"id\":\""};
static const char *const BETWEENS[2] = {"\"}, {\"id\": \"", "\"},{\"id\":\""};

static PyObject *
cut_ids(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "cut_ids(text) takes a str");
        return NULL;
    }
    PyObject *text = args[0];
    if (PyUnicode_KIND(text) != PyUnicode_1BYTE_KIND)
        Py_RETURN_NONE;
    const char *s = (const char *)PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    const char *open = NULL;
    int spelling;
    for (spelling = 0; spelling < 2 && open == NULL; spelling++)
        open = memmem(s, n, OPENINGS[spelling], strlen(OPENINGS[spelling]));
    if (open == NULL)
        Py_RETURN_NONE;
    spelling--;
    Py_ssize_t start = open - s, first = start + strlen(OPENINGS[spelling]);
    const char *close = memmem(s + first, n - first, "\"}]", 3);
    if (close == NULL)
        Py_RETURN_NONE;
    Py_ssize_t end = close - s;
    PyObject *ids = joined_ids(s + first, end - first, BETWEENS[spelling], strlen(BETWEENS[spelling]), 1);
    if (ids == NULL || ids == Py_None)
        return ids;
    PyObject *out = Py_BuildValue("(nnN)", start, end, ids);
    return out;
}

static inline uint64_t
hash_bytes(const char *p, Py_ssize_t len)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (Py_ssize_t i = 0; i < len; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

/* One id of `joined` held by a table slot: where it starts, its length and its rank (from 0) among
 * the ids with repeats dropped. */
typedef struct {
    Py_ssize_t start, len, rank;
} id_slot;

static Py_ssize_t
find_slot(const id_slot *ids, const Py_ssize_t *table, size_t mask, const char *s, const char *p,
          Py_ssize_t len, uint64_t h)
{
    for (size_t at = (size_t)h & mask;; at = (at + 1) & mask) {
        Py_ssize_t j = table[at];
        if (j < 0)
            return -1 - (Py_ssize_t)at; /* empty: where it would go */
        if (ids[j].len == len && memcmp(s + ids[j].start, p, len) == 0)
            return j;
    }
}

static PyObject *
rank_ids(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "rank_ids(joined, labels) takes 2 arguments");
        return NULL;
    }
    PyObject *joined = args[0], *labels = args[1];
    if (!PyUnicode_Check(joined) || !PyList_Check(labels)) {
        PyErr_SetString(PyExc_TypeError, "rank_ids takes a str and a list of str");
        return NULL;
    }
    if (!PyUnicode_IS_ASCII(joined))
        Py_RETURN_NONE;
    const char *s = (const char *)PyUnicode_1BYTE_DATA(joined);
    Py_ssize_t n = PyUnicode_GET_LENGTH(joined), k = 0;
    if (n) {
        k = 1;
        for (const char *q = s; (q = memchr(q, '\n', n - (q - s))) != NULL; q++)
            k++;
    }
    size_t size = 16;
    while (size < (size_t)k * 2)
        size <<= 1;
    id_slot *ids = PyMem_Malloc(sizeof(id_slot) * (k ? k : 1));
    Py_ssize_t *table = PyMem_Malloc(sizeof(Py_ssize_t) * size);
    PyObject *ranks = NULL, *out = NULL;
    if (ids == NULL || table == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memset(table, 0xff, sizeof(Py_ssize_t) * size); /* every slot -1: empty */
    size_t mask = size - 1;
    Py_ssize_t unique = 0, pos = 0;
    for (Py_ssize_t i = 0; i < k; i++) {
        const char *q = memchr(s + pos, '\n', n - pos);
        Py_ssize_t end = q == NULL ? n : q - s;
        Py_ssize_t got = find_slot(ids, table, mask, s, s + pos, end - pos, hash_bytes(s + pos, end - pos));
        if (got < 0) {
            ids[unique].start = pos;
            ids[unique].len = end - pos;
            ids[unique].rank = unique;
            table[-1 - got] = unique++;
        }
        pos = end + 1;
    }
    Py_ssize_t m = PyList_GET_SIZE(labels);
    ranks = PyList_New(m);
    if (ranks == NULL)
        goto done;
    for (Py_ssize_t j = 0; j < m; j++) {
        PyObject *label = PyList_GET_ITEM(labels, j);
        if (!PyUnicode_Check(label)) {
            PyErr_SetString(PyExc_TypeError, "rank_ids takes a list of str");
            goto done;
        }
        Py_ssize_t rank = 0;
        if (PyUnicode_IS_ASCII(label) && unique) {
            /* a label that is not ASCII equals no ASCII id */
            const char *p = (const char *)PyUnicode_1BYTE_DATA(label);
            Py_ssize_t len = PyUnicode_GET_LENGTH(label);
            Py_ssize_t got = find_slot(ids, table, mask, s, p, len, hash_bytes(p, len));
            rank = got < 0 ? 0 : ids[got].rank + 1;
        }
        PyObject *r = PyLong_FromSsize_t(rank);
        if (r == NULL)
            goto done;
        PyList_SET_ITEM(ranks, j, r);
    }
    out = Py_BuildValue("(nnO)", k, k - unique, ranks);
done:
    Py_XDECREF(ranks);
    PyMem_Free(ids);
    PyMem_Free(table);
    return out;
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
    {"join_ids", (PyCFunction)(void (*)(void))join_ids, METH_FASTCALL,
     "join_ids(body, between): the ids of an ASCII body of chunks given as ids alone, joined by line "
     "breaks, or None."},
    {"cut_ids", (PyCFunction)(void (*)(void))cut_ids, METH_FASTCALL,
     "cut_ids(text): (start, end, ids joined) of a line whose chunks are ids alone, or None."},
    {"rank_ids", (PyCFunction)(void (*)(void))rank_ids, METH_FASTCALL,
     "rank_ids(joined, labels): (ids, repeats, each label's rank among the ids) of ids joined by line "
     "breaks, or None."},
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
