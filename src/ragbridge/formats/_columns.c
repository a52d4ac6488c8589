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
 * plain_labels(relevant, top): True where the dict `relevant` holds labels that are ids as the id rule
 *   leaves them, in ASCII (printing, not empty, no space at either end), each with a grade that is an
 *   int from 0 to `top`; else None (the Python checks decide).
 * interleave(ids, texts, middle, between): between.join(map(middle.join, zip(ids, texts))).
 * plain_line(text, top): for a line that is exactly `{"id": "I", "question": "Q", "contexts": [{"id":
 *   "C"}, ...], "relevant": {"L": G, ...}}` in one of the two spellings (``relevant`` may be left out),
 *   every string ASCII that prints with no quote or backslash (so each is its own JSON text), the
 *   ids and labels not empty with no space at either end, each grade an int from 0 to `top` written
 *   as JSON writes it and no label given twice: (the record {"id": I, "question": Q[, "relevant":
 *   {L: G, ...}]}, the chunk ids joined by line breaks as join_ids joins them); else None (the
 *   Python steps decide, and give the same for a line this takes).
 * ids_line(record, joined): the canonical line (UTF-8 bytes, compact JSON) of a record {"id": I,
 *   "question": Q[, "relevant": {L: G, ...}]} (those keys, in that order) whose chunks are the ids
 *   `joined` by line breaks, where I, Q and each L are ASCII str that print with no quote or
 *   backslash and each G an int; else None (record_line writes it).
 * score_lines(lines, max_repeat[, cls, fields_sets]): per line of scores.jsonl (bytes, no line
 *   break) written as a run writes it (ragbridge.run.folder.score_json: the fields of
 *   ragbridge.schema.Score in their order, compact, the optional repeat, not_run, cost and cached
 *   after evidence), with ids that are ASCII, print and have no space at either end, strings without
 *   escape or control character (UTF-8 beyond ASCII), numbers without a sign (value at most 1,
 *   every float finite, counts and repeat whole, repeat below max_repeat), evidence null, no repeats
 *   summary and a native_value that is null, a boolean, a string or a number: the dict of its fields
 *   (every field, the defaults of those left out), or with `cls` the model made of it
 *   (model_construct's steps, its fields set fields_sets[mask]); None for any other line (the
 *   Python steps read it, and give the same for a line this takes). Also, a byte a line, which
 *   optional fields it gives (mask bits 0 to 3). Numbers are read as Python reads them, correctly
 *   rounded (Clinger's exact case, else PyOS_string_to_double).
 */
#define _GNU_SOURCE /* memmem */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <math.h>
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

/* What may not be copied as it is from an id: a quote (an id's end), a backslash, a control
 * character, DEL or a byte that is not ASCII (set up when the module is made). */
static unsigned char NOT_ID[256];

/* The ids of the body s[0:n] of chunks given as ids alone (`id between id ...`), joined by line
 * breaks, or None where it is not exactly that with ASCII ids that print, not empty, with no space at
 * either end and no quote or backslash: one walk, each id checked as it is copied. */
static PyObject *
joined_ids(const char *s, Py_ssize_t n, const char *b, Py_ssize_t nb)
{
    PyObject *out = PyUnicode_New(n, 127); /* at most the body's length */
    if (out == NULL)
        return NULL;
    char *o0 = (char *)PyUnicode_1BYTE_DATA(out), *o = o0;
    Py_ssize_t pos = 0;
    for (;;) {
        Py_ssize_t end = pos;
        while (end < n && !NOT_ID[(unsigned char)s[end]])
            *o++ = s[end++];
        if (end < n && s[end] != '"')
            goto refuse;
        if (end == pos || s[pos] == ' ' || s[end - 1] == ' ')
            goto refuse;
        if (end == n)
            break;
        if (n - end < nb || memcmp(s + end, b, nb) != 0)
            goto refuse;
        *o++ = '\n';
        pos = end + nb;
    }
    if (o - o0 < n && PyUnicode_Resize(&out, o - o0) < 0)
        return NULL;
    return out;
refuse:
    Py_DECREF(out);
    Py_RETURN_NONE;
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
    return joined_ids(s, n, b, nb);
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
    /* the first "}] after the opening: the first ] with "} before it (a ] is rare among ids) */
    Py_ssize_t end = -1;
    for (const char *q = s + first; (q = memchr(q, ']', n - (q - s))) != NULL; q++) {
        if (q - s >= first + 2 && q[-1] == '}' && q[-2] == '"') {
            end = q - 2 - s;
            break;
        }
    }
    if (end < 0)
        Py_RETURN_NONE;
    PyObject *ids = joined_ids(s + first, end - first, BETWEENS[spelling], strlen(BETWEENS[spelling]));
    if (ids == NULL || ids == Py_None)
        return ids;
    PyObject *out = Py_BuildValue("(nnN)", start, end, ids);
    return out;
}

/* One id of `joined` held by a table slot: where it starts, its length and its rank (from 0) among
 * the ids with repeats dropped. */
typedef struct {
    Py_ssize_t start, len;
    uint64_t hash;
} id_slot;

#define FNV_START 1469598103934665603ULL
#define FNV_STEP(h, c) (((h) ^ (unsigned char)(c)) * 1099511628211ULL)

/* The slot of the id p[0:len] (hash h) in `table`, or -1 - (where it would go) when it is not there. */
static Py_ssize_t
find_slot(const id_slot *ids, const int32_t *table, size_t mask, const char *s, const char *p,
          Py_ssize_t len, uint64_t h)
{
    for (size_t at = (size_t)(h ^ (h >> 29)) & mask;; at = (at + 1) & mask) {
        int32_t j = table[at];
        if (j < 0)
            return -1 - (Py_ssize_t)at;
        if (ids[j].hash == h && ids[j].len == len && memcmp(s + ids[j].start, p, len) == 0)
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
    Py_ssize_t n = PyUnicode_GET_LENGTH(joined), most = n + 1; /* ids: at most a line break each, and one */
    if (most > INT32_MAX / 2) {
        PyErr_SetString(PyExc_OverflowError, "rank_ids: too many ids");
        return NULL;
    }
    size_t size = 16;
    while (size < (size_t)most * 2)
        size <<= 1;
    id_slot *ids = PyMem_Malloc(sizeof(id_slot) * most);
    int32_t *table = PyMem_Malloc(sizeof(int32_t) * size);
    PyObject *ranks = NULL, *out = NULL;
    if (ids == NULL || table == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memset(table, 0xff, sizeof(int32_t) * size); /* every slot -1: empty */
    size_t mask = size - 1;
    Py_ssize_t k = 0, unique = 0, pos = 0;
    while (n) { /* each id hashed as it is walked to its line break */
        uint64_t h = FNV_START;
        Py_ssize_t end = pos;
        while (end < n && s[end] != '\n') {
            h = FNV_STEP(h, s[end]);
            end++;
        }
        k++;
        Py_ssize_t got = find_slot(ids, table, mask, s, s + pos, end - pos, h);
        if (got < 0) {
            ids[unique].start = pos;
            ids[unique].len = end - pos;
            ids[unique].hash = h;
            table[-1 - got] = (int32_t)unique++;
        }
        if (end == n)
            break;
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
        if (PyUnicode_IS_ASCII(label) && unique) { /* a label that is not ASCII equals no ASCII id */
            const char *p = (const char *)PyUnicode_1BYTE_DATA(label);
            Py_ssize_t len = PyUnicode_GET_LENGTH(label);
            uint64_t h = FNV_START;
            for (Py_ssize_t i = 0; i < len; i++)
                h = FNV_STEP(h, p[i]);
            Py_ssize_t got = find_slot(ids, table, mask, s, p, len, h);
            rank = got < 0 ? 0 : got + 1; /* slots are taken in rank order */
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
plain_labels(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    long long top;
    if (nargs != 2 || !PyLong_Check(args[1]) || ((top = PyLong_AsLongLong(args[1])) == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "plain_labels(relevant, top) takes a dict and an int");
        return NULL;
    }
    PyObject *labels = args[0], *key, *grade;
    if (!PyDict_CheckExact(labels))
        Py_RETURN_NONE;
    Py_ssize_t at = 0;
    while (PyDict_Next(labels, &at, &key, &grade)) {
        if (!PyUnicode_CheckExact(key) || !PyUnicode_IS_ASCII(key) || !PyLong_CheckExact(grade))
            Py_RETURN_NONE;
        Py_ssize_t n = PyUnicode_GET_LENGTH(key);
        const unsigned char *p = PyUnicode_1BYTE_DATA(key);
        if (n == 0 || p[0] == ' ' || p[n - 1] == ' ')
            Py_RETURN_NONE;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (p[i] < 0x20 || p[i] == 0x7f)
                Py_RETURN_NONE;
        }
        int overflow;
        long long g = PyLong_AsLongLongAndOverflow(grade, &overflow);
        if (overflow || g < 0 || g > top)
            Py_RETURN_NONE;
    }
    Py_RETURN_TRUE;
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

/* The pieces of a plain line, per spelling: after the id's opening, between the id and the question,
 * between the question and the chunks, after the chunks when labels follow, between two labels,
 * between a label and its grade, and the end with or without labels. */
static const char *const LINE_OPEN[2] = {"{\"id\": \"", "{\"id\":\""};
static const char *const LINE_QUESTION[2] = {"\", \"question\": \"", "\",\"question\":\""};
static const char *const LINE_CHUNKS[2] = {"\", \"contexts\": [{\"id\": \"", "\",\"contexts\":[{\"id\":\""};
static const char *const LINE_LABELS[2] = {"\"}], \"relevant\": {\"", "\"}],\"relevant\":{\""};
static const char *const LINE_NEXT_LABEL[2] = {", \"", ",\""};
static const char *const LINE_GRADE[2] = {"\": ", "\":"};

/* Whether s[*at:n] starts with `piece`; past it when it does. */
static int
take(const char *s, Py_ssize_t n, Py_ssize_t *at, const char *piece)
{
    size_t k = strlen(piece);
    if ((size_t)(n - *at) < k || memcmp(s + *at, piece, k) != 0)
        return 0;
    *at += k;
    return 1;
}

/* The end of the string that starts at s[at] (where its closing quote is): every character one that
 * an id may hold (NOT_ID), or -1. */
static Py_ssize_t
plain_string(const char *s, Py_ssize_t n, Py_ssize_t at)
{
    while (at < n && !NOT_ID[(unsigned char)s[at]])
        at++;
    return at < n && s[at] == '"' ? at : -1;
}

static PyObject *
ascii_str(const char *p, Py_ssize_t size)
{
    PyObject *out = PyUnicode_New(size, 127);
    if (out != NULL)
        memcpy(PyUnicode_1BYTE_DATA(out), p, size);
    return out;
}

static PyObject *
plain_line(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    long long top;
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyLong_Check(args[1])
        || ((top = PyLong_AsLongLong(args[1])) == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "plain_line(text, top) takes a str and an int");
        return NULL;
    }
    PyObject *text = args[0];
    if (!PyUnicode_IS_ASCII(text))
        Py_RETURN_NONE;
    const char *s = (const char *)PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), at = 0;
    int sp = n > 6 && s[6] == ' ' ? 0 : 1; /* `{"id": ` or `{"id":"` */
    if (!take(s, n, &at, LINE_OPEN[sp]))
        Py_RETURN_NONE;
    Py_ssize_t id0 = at, id1 = plain_string(s, n, at);
    if (id1 <= id0 || s[id0] == ' ' || s[id1 - 1] == ' ')
        Py_RETURN_NONE;
    at = id1;
    if (!take(s, n, &at, LINE_QUESTION[sp]))
        Py_RETURN_NONE;
    Py_ssize_t q0 = at, q1 = plain_string(s, n, at);
    if (q1 < 0)
        Py_RETURN_NONE;
    at = q1;
    if (!take(s, n, &at, LINE_CHUNKS[sp]))
        Py_RETURN_NONE;
    /* the chunks end at the first "}] (no id holds a quote) */
    Py_ssize_t c0 = at, c1 = -1;
    for (const char *q = s + c0; (q = memchr(q, ']', n - (q - s))) != NULL; q++) {
        if (q - s >= c0 + 2 && q[-1] == '}' && q[-2] == '"') {
            c1 = q - 2 - s;
            break;
        }
    }
    if (c1 < 0)
        Py_RETURN_NONE;
    int labelled = 0;
    at = c1;
    if (take(s, n, &at, LINE_LABELS[sp]))
        labelled = 1;
    else if (!(n - c1 == 4 && memcmp(s + c1, "\"}]}", 4) == 0))
        Py_RETURN_NONE;
    PyObject *relevant = NULL, *record = NULL, *ids = NULL, *value = NULL;
    if (labelled) {
        relevant = PyDict_New();
        if (relevant == NULL)
            return NULL;
        Py_ssize_t pairs = 0;
        for (;;) {
            Py_ssize_t l0 = at, l1 = plain_string(s, n, at);
            if (l1 <= l0 || s[l0] == ' ' || s[l1 - 1] == ' ')
                goto refuse;
            at = l1;
            if (!take(s, n, &at, LINE_GRADE[sp]))
                goto refuse;
            /* a JSON integer without sign: 0, or digits not starting with 0 */
            Py_ssize_t g0 = at;
            long long grade = 0;
            while (at < n && s[at] >= '0' && s[at] <= '9' && at - g0 < 18)
                grade = grade * 10 + (s[at++] - '0');
            if (at == g0 || (s[g0] == '0' && at - g0 > 1) || grade > top)
                goto refuse;
            PyObject *label = ascii_str(s + l0, l1 - l0);
            PyObject *g = label ? PyLong_FromLongLong(grade) : NULL;
            int failed = g == NULL || PyDict_SetItem(relevant, label, g) < 0;
            Py_XDECREF(label);
            Py_XDECREF(g);
            if (failed)
                goto fail;
            pairs++;
            if (take(s, n, &at, LINE_NEXT_LABEL[sp]))
                continue;
            if (n - at == 2 && s[at] == '}' && s[at + 1] == '}')
                break;
            goto refuse;
        }
        if (PyDict_GET_SIZE(relevant) != pairs) /* a label given twice: the Python steps report it */
            goto refuse;
    }
    ids = joined_ids(s + c0, c1 - c0, BETWEENS[sp], strlen(BETWEENS[sp]));
    if (ids == NULL)
        goto fail;
    if (ids == Py_None)
        goto refuse;
    record = PyDict_New();
    if (record == NULL)
        goto fail;
    if ((value = ascii_str(s + id0, id1 - id0)) == NULL || PyDict_SetItemString(record, "id", value) < 0)
        goto fail;
    Py_CLEAR(value);
    if ((value = ascii_str(s + q0, q1 - q0)) == NULL
        || PyDict_SetItemString(record, "question", value) < 0)
        goto fail;
    Py_CLEAR(value);
    if (relevant != NULL && PyDict_SetItemString(record, "relevant", relevant) < 0)
        goto fail;
    Py_XDECREF(relevant);
    return Py_BuildValue("(NN)", record, ids);
refuse:
    Py_XDECREF(relevant);
    Py_XDECREF(ids);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(relevant);
    Py_XDECREF(ids);
    Py_XDECREF(record);
    Py_XDECREF(value);
    return NULL;
}

/* Whether `o` is an ASCII str that is its own JSON text (no character NOT_ID refuses). */
static int
plain_ascii(PyObject *o)
{
    if (!PyUnicode_CheckExact(o) || !PyUnicode_IS_ASCII(o))
        return 0;
    const unsigned char *p = PyUnicode_1BYTE_DATA(o);
    for (Py_ssize_t i = 0, n = PyUnicode_GET_LENGTH(o); i < n; i++) {
        if (NOT_ID[p[i]])
            return 0;
    }
    return 1;
}

static char *
put(char *o, const char *p, Py_ssize_t n)
{
    memcpy(o, p, n);
    return o + n;
}

static char *
put_str(char *o, PyObject *s)
{
    *o++ = '"';
    o = put(o, (const char *)PyUnicode_1BYTE_DATA(s), PyUnicode_GET_LENGTH(s));
    *o++ = '"';
    return o;
}

/* `g` in decimal, as JSON writes an integer (sprintf's "%lld", without its cost). */
static char *
put_int(char *o, long long g)
{
    char digits[24];
    int n = 0;
    unsigned long long u = g < 0 ? 0ULL - (unsigned long long)g : (unsigned long long)g;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (g < 0)
        *o++ = '-';
    while (n)
        *o++ = digits[--n];
    return o;
}

static PyObject *
ids_line(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "ids_line(record, joined) takes a dict and a str");
        return NULL;
    }
    PyObject *record = args[0], *joined = args[1];
    if (!PyDict_CheckExact(record) || !PyUnicode_IS_ASCII(joined))
        Py_RETURN_NONE;
    Py_ssize_t size = PyDict_GET_SIZE(record), at = 0;
    if (size < 2 || size > 3)
        Py_RETURN_NONE;
    PyObject *key, *value, *values[3] = {NULL, NULL, NULL};
    static const char *const KEYS[3] = {"id", "question", "relevant"};
    for (int i = 0; PyDict_Next(record, &at, &key, &value); i++) {
        if (!PyUnicode_CheckExact(key) || PyUnicode_CompareWithASCIIString(key, KEYS[i]) != 0)
            Py_RETURN_NONE;
        values[i] = value;
    }
    if (!plain_ascii(values[0]) || !plain_ascii(values[1]))
        Py_RETURN_NONE;
    PyObject *relevant = values[2];
    Py_ssize_t nj = PyUnicode_GET_LENGTH(joined);
    const char *j = (const char *)PyUnicode_1BYTE_DATA(joined);
    Py_ssize_t breaks = 0;
    for (const char *q = j; (q = memchr(q, '\n', nj - (q - j))) != NULL; q++)
        breaks++;
    /* {"id":"I","question":"Q","contexts":[{"id":"C"},{"id":"C"}],"relevant":{"L":G,...}} */
    Py_ssize_t total = 8 + PyUnicode_GET_LENGTH(values[0]) + 14 + PyUnicode_GET_LENGTH(values[1]) + 20 + nj
                       + breaks * 9 + 4;
    if (relevant != NULL) {
        if (!PyDict_CheckExact(relevant) || PyDict_GET_SIZE(relevant) == 0)
            Py_RETURN_NONE;
        total += 12;
        at = 0;
        while (PyDict_Next(relevant, &at, &key, &value)) {
            if (!plain_ascii(key) || !PyLong_CheckExact(value))
                Py_RETURN_NONE;
            total += PyUnicode_GET_LENGTH(key) + 4 + 21;
        }
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    char *o0 = PyBytes_AS_STRING(out), *o = o0;
    o = put(o, "{\"id\":", 6);
    o = put_str(o, values[0]);
    o = put(o, ",\"question\":", 12);
    o = put_str(o, values[1]);
    o = put(o, ",\"contexts\":[{\"id\":\"", 20);
    for (Py_ssize_t i = 0; i < nj; i++) {
        if (j[i] == '\n')
            o = put(o, "\"},{\"id\":\"", 10);
        else
            *o++ = j[i];
    }
    o = put(o, "\"}]", 3);
    if (relevant != NULL) {
        o = put(o, ",\"relevant\":{", 13);
        at = 0;
        int first = 1;
        while (PyDict_Next(relevant, &at, &key, &value)) {
            if (!first)
                *o++ = ',';
            first = 0;
            o = put_str(o, key);
            *o++ = ':';
            int overflow;
            long long g = PyLong_AsLongLongAndOverflow(value, &overflow);
            if (overflow) {
                Py_DECREF(out);
                Py_RETURN_NONE;
            }
            o = put_int(o, g);
        }
        *o++ = '}';
    }
    *o++ = '}';
    if (_PyBytes_Resize(&out, o - o0) < 0)
        return NULL;
    return out;
}


/* ---- score lines: a line of scores.jsonl as a run writes it ---------------------------------- */

/* The fields of a score in the order of ragbridge.schema.Score (its dict's keys, made once). */
#define N_SCORE_FIELDS 19
static const char *const SCORE_FIELDS[N_SCORE_FIELDS] = {
    "case_id", "metric", "backend", "value", "native_metric", "native_value", "passed", "reason", "error",
    "judge_calls", "prompt_tokens", "completion_tokens", "seconds", "evidence", "repeat", "not_run", "cost",
    "repeats", "cached"};
static PyObject *SCORE_KEYS[N_SCORE_FIELDS], *ZERO, *EMPTY_TUPLE, *NAME_DICT, *NAME_FIELDS_SET, *NAME_EXTRA,
    *NAME_PRIVATE;
enum { F_CASE, F_METRIC, F_BACKEND, F_VALUE, F_NATIVE_METRIC, F_NATIVE_VALUE, F_PASSED, F_REASON, F_ERROR,
       F_JUDGE_CALLS, F_PROMPT, F_COMPLETION, F_SECONDS, F_EVIDENCE, F_REPEAT, F_NOT_RUN, F_COST, F_REPEATS,
       F_CACHED };

/* A value read, or why not: REFUSED (the line is not one this reader takes: the Python steps read it),
 * FAILED (an exception is set). */
static PyObject REFUSED_, FAILED_;
#define REFUSED (&REFUSED_)
#define FAILED (&FAILED_)

/* A JSON string at s[*at] (its opening quote): every byte from 0x20 up but the quote and the backslash
 * (no escape), as a str (UTF-8 beyond ASCII, decoded strictly); `id`: an id as the id rule leaves it
 * in ASCII (printing, not empty, no space at either end). */
static PyObject *
score_str(const char *s, Py_ssize_t n, Py_ssize_t *at, int id)
{
    Py_ssize_t p = *at;
    if (p >= n || s[p] != '"')
        return REFUSED;
    Py_ssize_t a = ++p;
    int ascii = 1;
    while (p < n) {
        unsigned char c = (unsigned char)s[p];
        if (c == '"')
            break;
        if (c < 0x20 || c == '\\')
            return REFUSED;
        if (c >= 0x7f) {
            if (id)
                return REFUSED;
            ascii &= c < 0x80;
        }
        p++;
    }
    if (p >= n)
        return REFUSED;
    if (id && (p == a || s[a] == ' ' || s[p - 1] == ' '))
        return REFUSED;
    *at = p + 1;
    PyObject *out;
    if (ascii) {
        out = ascii_str(s + a, p - a);
    } else {
        out = PyUnicode_DecodeUTF8(s + a, p - a, NULL);
        if (out == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            return REFUSED;
        }
    }
    return out == NULL ? FAILED : out;
}

/* The powers of ten a double holds exactly. */
static const double POW10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12,
                                 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A JSON number without a sign at s[*at], `0` or digits not starting with 0, then a fraction and an
 * exponent if any, at most 40 characters: its double (finite, else REFUSED) in *value, and whether it
 * is an integer (digits alone) in *integer. */
static int
score_number(const char *s, Py_ssize_t n, Py_ssize_t *at, double *value, int *integer)
{
    Py_ssize_t p = *at, a = p;
    if (p >= n || s[p] < '0' || s[p] > '9')
        return 0;
    if (s[p] == '0')
        p++;
    else
        while (p < n && s[p] >= '0' && s[p] <= '9')
            p++;
    *integer = 1;
    if (p < n && s[p] == '.') {
        Py_ssize_t d = ++p;
        while (p < n && s[p] >= '0' && s[p] <= '9')
            p++;
        if (p == d)
            return 0;
        *integer = 0;
    }
    if (p < n && (s[p] == 'e' || s[p] == 'E')) {
        p++;
        if (p < n && (s[p] == '+' || s[p] == '-'))
            p++;
        Py_ssize_t d = p;
        while (p < n && s[p] >= '0' && s[p] <= '9')
            p++;
        if (p == d)
            return 0;
        *integer = 0;
    }
    /* Clinger's fast path: a significand of at most 19 digits below 2**53 and a power of ten of at
     * most 22 either way make the double in one correctly rounded multiplication or division; any
     * other number goes through Python's own correctly rounded reading */
    uint64_t m = 0;
    int digits = 0, e10 = 0, slow = 0;
    Py_ssize_t q = a;
    for (; q < p && s[q] != '.' && s[q] != 'e' && s[q] != 'E'; q++) {
        if (m == 0 && s[q] == '0')
            continue;
        if (digits++ < 19)
            m = m * 10 + (uint64_t)(s[q] - '0');
        else
            slow = 1;
    }
    if (q < p && s[q] == '.') {
        for (q++; q < p && s[q] != 'e' && s[q] != 'E'; q++) {
            if (m == 0 && s[q] == '0') {
                e10--;
                continue;
            }
            if (digits++ < 19) {
                m = m * 10 + (uint64_t)(s[q] - '0');
                e10--;
            } else
                slow = 1;
        }
    }
    if (q < p) { /* the exponent */
        int sign = 1, e = 0;
        q++;
        if (s[q] == '+' || s[q] == '-')
            sign = s[q++] == '-' ? -1 : 1;
        for (; q < p; q++) {
            if (e < 10000)
                e = e * 10 + (s[q] - '0');
        }
        e10 += sign * e;
    }
    if (!slow && m <= (1ULL << 53) && e10 >= -22 && e10 <= 22) {
        *value = m == 0 ? 0.0 : e10 >= 0 ? (double)m * POW10[e10] : (double)m / POW10[-e10];
        *at = p;
        return 1;
    }
    char buf[48];
    if (p - a > 40)
        return 0;
    memcpy(buf, s + a, p - a);
    buf[p - a] = '\0';
    char *end;
    double v = PyOS_string_to_double(buf, &end, NULL);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (end != buf + (p - a) || !isfinite(v))
        return 0;
    *value = v;
    *at = p;
    return 1;
}

/* A float field: a number (an integer taken as its float, as a strict float field takes it). */
static PyObject *
score_float(const char *s, Py_ssize_t n, Py_ssize_t *at, int nullable, double top)
{
    if (nullable && take(s, n, at, "null"))
        return Py_NewRef(Py_None);
    double v;
    int integer;
    if (!score_number(s, n, at, &v, &integer) || v > top)
        return REFUSED;
    PyObject *out = PyFloat_FromDouble(v);
    return out == NULL ? FAILED : out;
}

/* A count: a JSON integer from 0, at most 18 digits, below `top`. */
static PyObject *
score_count(const char *s, Py_ssize_t n, Py_ssize_t *at, long long top)
{
    Py_ssize_t p = *at, a = p;
    long long v = 0;
    while (p < n && s[p] >= '0' && s[p] <= '9' && p - a < 18)
        v = v * 10 + (s[p++] - '0');
    if (p == a || (s[a] == '0' && p - a > 1) || (p < n && s[p] >= '0' && s[p] <= '9') || v >= top)
        return REFUSED;
    *at = p;
    PyObject *out = PyLong_FromLongLong(v);
    return out == NULL ? FAILED : out;
}

static PyObject *
score_bool(const char *s, Py_ssize_t n, Py_ssize_t *at, int nullable)
{
    if (take(s, n, at, "true"))
        return Py_NewRef(Py_True);
    if (take(s, n, at, "false"))
        return Py_NewRef(Py_False);
    if (nullable && take(s, n, at, "null"))
        return Py_NewRef(Py_None);
    return REFUSED;
}

static PyObject *
score_text(const char *s, Py_ssize_t n, Py_ssize_t *at)
{
    if (take(s, n, at, "null"))
        return Py_NewRef(Py_None);
    return score_str(s, n, at, 0);
}

/* native_value: null, a boolean, a string or a number without a sign (an int for digits alone, at
 * most 18 of them, as JSON reads them into Python). */
static PyObject *
score_any(const char *s, Py_ssize_t n, Py_ssize_t *at)
{
    if (*at < n && s[*at] == '"')
        return score_str(s, n, at, 0);
    if (*at < n && (s[*at] == 't' || s[*at] == 'f' || s[*at] == 'n'))
        return score_bool(s, n, at, 1);
    Py_ssize_t a = *at;
    double v;
    int integer;
    if (!score_number(s, n, at, &v, &integer))
        return REFUSED;
    PyObject *out;
    if (integer) {
        if (*at - a > 18)
            return REFUSED;
        long long k = 0;
        for (Py_ssize_t p = a; p < *at; p++)
            k = k * 10 + (s[p] - '0');
        out = PyLong_FromLongLong(k);
    } else {
        out = PyFloat_FromDouble(v);
    }
    return out == NULL ? FAILED : out;
}

/* The dict of a score line s[0:n] as a run writes it, its fields in `Score`'s order with the
 * defaults of those left out, and in *mask which of repeat, not_run, cost and cached it gives (bits 0
 * to 3); REFUSED for any other line, FAILED on an error. */
static PyObject *
score_line(const char *s, Py_ssize_t n, long long max_repeat, int *mask)
{
    static const char *const HEADS[13] = {
        "{\"case_id\":", ",\"metric\":", ",\"backend\":", ",\"value\":", ",\"native_metric\":",
        ",\"native_value\":", ",\"passed\":", ",\"reason\":", ",\"error\":", ",\"judge_calls\":",
        ",\"prompt_tokens\":", ",\"completion_tokens\":", ",\"seconds\":"};
    static const char *const OPTIONAL[4] = {",\"repeat\":", ",\"not_run\":", ",\"cost\":", ",\"cached\":"};
    static const int OPTIONAL_FIELD[4] = {F_REPEAT, F_NOT_RUN, F_COST, F_CACHED};
    PyObject *v[N_SCORE_FIELDS] = {NULL};
    PyObject *out = REFUSED;
    Py_ssize_t at = 0;
    for (int f = 0; f <= F_SECONDS; f++) {
        if (!take(s, n, &at, HEADS[f]))
            goto done;
        PyObject *got;
        switch (f) {
        case F_CASE: case F_METRIC: case F_BACKEND:
            got = score_str(s, n, &at, 1);
            break;
        case F_VALUE:
            got = score_float(s, n, &at, 1, 1.0);
            break;
        case F_NATIVE_VALUE:
            got = score_any(s, n, &at);
            break;
        case F_PASSED:
            got = score_bool(s, n, &at, 1);
            break;
        case F_JUDGE_CALLS: case F_PROMPT: case F_COMPLETION:
            got = score_count(s, n, &at, 1000000000000000000LL);
            break;
        case F_SECONDS:
            got = score_float(s, n, &at, 0, INFINITY);
            break;
        default: /* native_metric, reason, error */
            got = score_text(s, n, &at);
        }
        if (got == REFUSED || got == FAILED) {
            out = got;
            goto done;
        }
        v[f] = got;
    }
    if (!take(s, n, &at, ",\"evidence\":null"))
        goto done;
    *mask = 0;
    for (int k = 0; k < 4; k++) {
        if (!take(s, n, &at, OPTIONAL[k]))
            continue;
        PyObject *got;
        if (k == 0)
            got = score_count(s, n, &at, max_repeat);
        else if (k == 2)
            got = score_float(s, n, &at, 1, INFINITY);
        else
            got = score_bool(s, n, &at, 0);
        if (got == REFUSED || got == FAILED) {
            out = got;
            goto done;
        }
        v[OPTIONAL_FIELD[k]] = got;
        *mask |= 1 << k;
    }
    if (at != n - 1 || s[at] != '}')
        goto done;
    PyObject *d = _PyDict_NewPresized(N_SCORE_FIELDS);
    if (d == NULL) {
        out = FAILED;
        goto done;
    }
    for (int f = 0; f < N_SCORE_FIELDS; f++) {
        /* the defaults of those left out: repeat 0, not_run and cached False, the rest None */
        PyObject *value = v[f] != NULL ? v[f] : f == F_REPEAT ? ZERO : f == F_NOT_RUN || f == F_CACHED
                          ? Py_False : Py_None;
        if (PyDict_SetItem(d, SCORE_KEYS[f], value) < 0) {
            Py_DECREF(d);
            out = FAILED;
            goto done;
        }
    }
    out = d;
done:
    for (int f = 0; f < N_SCORE_FIELDS; f++)
        Py_XDECREF(v[f]);
    return out;
}

/* An instance of `cls` (a pydantic model) holding the fields `d` (every field, checked), with
 * `given` (a frozenset) as the fields set: the steps of pydantic's `model_construct`, each attribute
 * set as `object.__setattr__` sets it. */
static PyObject *
made_model(PyObject *cls, PyObject *d, PyObject *given)
{
    PyObject *obj = PyBaseObject_Type.tp_new((PyTypeObject *)cls, EMPTY_TUPLE, NULL);
    PyObject *fields_set = obj != NULL ? PySet_New(given) : NULL;
    if (fields_set == NULL || PyObject_GenericSetAttr(obj, NAME_DICT, d) < 0
        || PyObject_GenericSetAttr(obj, NAME_FIELDS_SET, fields_set) < 0
        || PyObject_GenericSetAttr(obj, NAME_EXTRA, Py_None) < 0
        || PyObject_GenericSetAttr(obj, NAME_PRIVATE, Py_None) < 0) {
        Py_XDECREF(obj);
        obj = NULL;
    }
    Py_XDECREF(fields_set);
    return obj;
}

static PyObject *
score_lines(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    long long max_repeat;
    if ((nargs != 2 && nargs != 4) || !PyList_Check(args[0]) || !PyLong_Check(args[1])
        || ((max_repeat = PyLong_AsLongLong(args[1])) == -1 && PyErr_Occurred())
        || (nargs == 4 && (!PyType_Check(args[2]) || !PyTuple_Check(args[3]) || PyTuple_GET_SIZE(args[3]) != 16))) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "score_lines(lines, max_repeat[, cls, fields_sets]) takes a list, "
                        "an int, a class and a tuple of 16 frozensets");
        return NULL;
    }
    PyObject *lines = args[0], *cls = nargs == 4 ? args[2] : NULL;
    Py_ssize_t count = PyList_GET_SIZE(lines);
    PyObject *out = PyList_New(count);
    PyObject *masks = PyBytes_FromStringAndSize(NULL, count);
    if (out == NULL || masks == NULL)
        goto fail;
    char *m = PyBytes_AS_STRING(masks);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        if (!PyBytes_Check(line)) {
            PyErr_SetString(PyExc_TypeError, "score_lines: each line is bytes");
            goto fail;
        }
        int mask = 0;
        PyObject *got = score_line(PyBytes_AS_STRING(line), PyBytes_GET_SIZE(line), max_repeat, &mask);
        if (got == FAILED)
            goto fail;
        if (got == REFUSED) {
            got = Py_NewRef(Py_None);
        } else if (cls != NULL) {
            PyObject *obj = made_model(cls, got, PyTuple_GET_ITEM(args[3], mask));
            Py_DECREF(got);
            if (obj == NULL)
                goto fail;
            got = obj;
        }
        PyList_SET_ITEM(out, i, got);
        m[i] = (char)mask;
    }
    return Py_BuildValue("(NN)", out, masks);
fail:
    Py_XDECREF(out);
    Py_XDECREF(masks);
    return NULL;
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
    {"plain_labels", (PyCFunction)(void (*)(void))plain_labels, METH_FASTCALL,
     "plain_labels(relevant, top): True where every label is an ASCII id and every grade an int in "
     "0..top, else None."},
    {"interleave", (PyCFunction)(void (*)(void))interleave, METH_FASTCALL,
     "interleave(ids, texts, middle, between): between.join(map(middle.join, zip(ids, texts)))."},
    {"plain_line", (PyCFunction)(void (*)(void))plain_line, METH_FASTCALL,
     "plain_line(text, top): (record, chunk ids joined) of a line of the ranking fields alone in a "
     "plain spelling, or None."},
    {"ids_line", (PyCFunction)(void (*)(void))ids_line, METH_FASTCALL,
     "ids_line(record, joined): the canonical line of a record of plain ranking fields whose chunk ids "
     "are `joined`, or None."},
    {"score_lines", (PyCFunction)(void (*)(void))score_lines, METH_FASTCALL,
     "score_lines(lines, max_repeat[, cls, fields_sets]): per line of scores.jsonl (bytes) as a run "
     "writes it its fields' dict (with cls: the model made of them), else None; and which optional "
     "fields each gives, a byte a line."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ragbridge.formats._columns",
    "Chunk columns cut from and joined into JSON text, in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__columns(void)
{
    for (int c = 0; c < 256; c++)
        NOT_ID[c] = c < 0x20 || c >= 0x7f || c == '"' || c == '\\';
    for (int f = 0; f < N_SCORE_FIELDS; f++) {
        if ((SCORE_KEYS[f] = PyUnicode_InternFromString(SCORE_FIELDS[f])) == NULL)
            return NULL;
    }
    if ((ZERO = PyLong_FromLong(0)) == NULL || (EMPTY_TUPLE = PyTuple_New(0)) == NULL
        || (NAME_DICT = PyUnicode_InternFromString("__dict__")) == NULL
        || (NAME_FIELDS_SET = PyUnicode_InternFromString("__pydantic_fields_set__")) == NULL
        || (NAME_EXTRA = PyUnicode_InternFromString("__pydantic_extra__")) == NULL
        || (NAME_PRIVATE = PyUnicode_InternFromString("__pydantic_private__")) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
