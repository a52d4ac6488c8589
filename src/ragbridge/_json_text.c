/* Plain JSON values as indented JSON text, in C: what ragbridge.json_text.plain_json writes (the
 * characters of json.dumps(o, indent=2, ensure_ascii=False, allow_nan=False)), as UTF-8 bytes, in one
 * call for a value however nested (ragbridge.json_text.plain_json_utf8 calls it where the package was
 * built with it; plain_json, beside it, writes the same text and is used otherwise).
 *
 * indented(o, level, encode_basestring): `o` at `level` (its members indented level + 1 steps of two
 * spaces) as UTF-8 bytes: dicts with str keys and lists (each member on a line of its own, ", " and
 * ": " as json.dumps(indent=2) separates them, "{}" and "[]" when empty), str (written by
 * `encode_basestring`, json.encoder's), int and float (their repr; a float only when finite), True,
 * False and None; only these types exactly. TypeError for any other type or key (ValueError for a
 * float that is not finite), as plain_json; None where a string does not encode to UTF-8 (half a
 * surrogate pair: the caller writes the text in Python and meets the error there).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

typedef struct {
    char *data;
    Py_ssize_t size, room;
} buffer;

static int
put(buffer *b, const char *p, Py_ssize_t n)
{
    if (b->size + n > b->room) {
        Py_ssize_t room = b->room * 2 > b->size + n ? b->room * 2 : b->size + n + 1024;
        char *data = PyMem_Realloc(b->data, room);
        if (data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->data = data;
        b->room = room;
    }
    memcpy(b->data + b->size, p, n);
    b->size += n;
    return 0;
}

/* A line break and the indent of `level` (two spaces a level). */
static int
put_break(buffer *b, int level)
{
    static const char SPACES[] = "                                                                ";
    if (put(b, "\n", 1) < 0)
        return -1;
    for (Py_ssize_t n = 2 * (Py_ssize_t)level; n > 0; n -= sizeof(SPACES) - 1) {
        if (put(b, SPACES, n < (Py_ssize_t)sizeof(SPACES) - 1 ? n : (Py_ssize_t)sizeof(SPACES) - 1) < 0)
            return -1;
    }
    return 0;
}

/* 1: a string did not encode to UTF-8 (no exception left set). */
#define NOT_UTF8 1

static int
put_text(buffer *b, PyObject *text)
{
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(text, &n);
    if (p == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
            PyErr_Clear();
            return NOT_UTF8;
        }
        return -1;
    }
    return put(b, p, n);
}

static int
put_str(buffer *b, PyObject *s, PyObject *encode)
{
    PyObject *text = PyObject_CallOneArg(encode, s);
    if (text == NULL)
        return -1;
    int got = PyUnicode_Check(text) ? put_text(b, text) : -1;
    if (got == -1 && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "encode_basestring gave no str");
    Py_DECREF(text);
    return got;
}

static int
put_repr(buffer *b, PyObject *o, reprfunc repr)
{
    PyObject *text = repr(o);
    if (text == NULL)
        return -1;
    int got = put_text(b, text);
    Py_DECREF(text);
    return got;
}

static int
put_value(buffer *b, PyObject *o, int level, PyObject *encode)
{
    if (o == Py_None)
        return put(b, "null", 4);
    if (o == Py_True)
        return put(b, "true", 4);
    if (o == Py_False)
        return put(b, "false", 5);
    PyTypeObject *t = Py_TYPE(o);
    if (t == &PyUnicode_Type)
        return put_str(b, o, encode);
    if (t == &PyLong_Type)
        return put_repr(b, o, PyLong_Type.tp_repr);
    if (t == &PyFloat_Type) {
        if (!isfinite(PyFloat_AS_DOUBLE(o))) {
            PyErr_SetString(PyExc_ValueError, "Out of range float values are not JSON compliant");
            return -1;
        }
        return put_repr(b, o, PyFloat_Type.tp_repr);
    }
    if (t != &PyList_Type && t != &PyDict_Type) {
        PyErr_Format(PyExc_TypeError, "%s is not a plain JSON value", t->tp_name);
        return -1;
    }
    int got = 0;
    if (Py_EnterRecursiveCall(" while writing JSON text"))
        return -1;
    if (t == &PyList_Type) {
        if (PyList_GET_SIZE(o) == 0) {
            got = put(b, "[]", 2);
        } else {
            got = put(b, "[", 1);
            for (Py_ssize_t i = 0; got == 0 && i < PyList_GET_SIZE(o); i++) {
                if ((i && put(b, ",", 1) < 0) || put_break(b, level + 1) < 0)
                    got = -1;
                else {
                    PyObject *item = PyList_GET_ITEM(o, i);
                    Py_INCREF(item);
                    got = put_value(b, item, level + 1, encode);
                    Py_DECREF(item);
                }
            }
            if (got == 0 && (put_break(b, level) < 0 || put(b, "]", 1) < 0))
                got = -1;
        }
    } else if (PyDict_GET_SIZE(o) == 0) {
        got = put(b, "{}", 2);
    } else {
        Py_ssize_t at = 0;
        PyObject *key, *value;
        int first = 1;
        got = put(b, "{", 1);
        while (got == 0 && PyDict_Next(o, &at, &key, &value)) {
            if (!PyUnicode_CheckExact(key)) {
                PyErr_SetString(PyExc_TypeError, "a key that is not a string");
                got = -1;
                break;
            }
            Py_INCREF(key);
            Py_INCREF(value);
            if ((!first && put(b, ",", 1) < 0) || put_break(b, level + 1) < 0)
                got = -1;
            else if ((got = put_str(b, key, encode)) == 0 && (got = put(b, ": ", 2)) == 0)
                got = put_value(b, value, level + 1, encode);
            Py_DECREF(key);
            Py_DECREF(value);
            first = 0;
        }
        if (got == 0 && (put_break(b, level) < 0 || put(b, "}", 1) < 0))
            got = -1;
    }
    Py_LeaveRecursiveCall();
    return got;
}

static PyObject *
indented(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    long level;
    if (nargs != 3 || !PyLong_Check(args[1]) || ((level = PyLong_AsLong(args[1])) == -1 && PyErr_Occurred())
        || level < 0 || level > 100000 || !PyCallable_Check(args[2])) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "indented(o, level, encode_basestring) takes a value, a level "
                                         "from 0 and a function");
        return NULL;
    }
    buffer b = {PyMem_Malloc(1024), 0, 1024};
    if (b.data == NULL)
        return PyErr_NoMemory();
    int got = put_value(&b, args[0], (int)level, args[2]);
    PyObject *out = got == 0 ? PyBytes_FromStringAndSize(b.data, b.size) : got == NOT_UTF8 ? Py_NewRef(Py_None)
                                                                                           : NULL;
    PyMem_Free(b.data);
    return out;
}

static PyMethodDef methods[] = {
    {"indented", (PyCFunction)(void (*)(void))indented, METH_FASTCALL,
     "indented(o, level, encode_basestring): plain JSON values as json.dumps(indent=2) writes them, "
     "UTF-8 bytes (None where a string does not encode)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ragbridge._json_text", "Plain JSON values as indented JSON text, in C.", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__json_text(void)
{
    return PyModule_Create(&module);
}
