/* Arrow string columns read straight from the attributes of Python objects (refold.storage._columns).
 *
 * An append turns its validated events (NewEvent values) into Arrow arrays, one per field. In
 * Python that is, per field, a list comprehension (~25 us per 1k events: an attribute load per
 * value) and pyarrow's conversion of the list (~35 us): ~0.5 ms of a 1k-event append, all of it
 * before the hashing can start. This module reads the attributes and writes the Arrow buffers
 * (validity bitmap, int32 offsets, UTF-8 data) in one pass; storage/sealing.py wraps them with
 * pa.Array.from_buffers.
 *
 *   strings(objects, name[, bounds]) -> (validity, offsets, data, null_count, same) or None
 *       validity: None when no value is None, else the LSB-first bitmap Arrow uses; offsets:
 *       n + 1 little-endian int32; data: the UTF-8 of the values one after the other; same:
 *       every value equals the first (all None counts). With bounds true, two more items: the
 *       least and the greatest value (by their UTF-8 bytes, as Arrow's min_max orders strings;
 *       None when every value is None).
 *
 *   nones(objects, name) -> int
 *       how many of the objects hold None in the attribute.
 *
 *   string_lists(objects, name) -> (list_offsets, item_offsets, item_data) or None
 *       for attributes that hold a tuple or list of str (no None items): the list array's
 *       offsets, and its string items' offsets and data.
 *
 * None means "not this way": a value of another type, a str that has no UTF-8 (lone
 * surrogates), or data past int32 offsets. The caller then converts the field with pyarrow,
 * which accepts or rejects it as it always did, so both ways give the same arrays or the same
 * error. Nothing here runs without the GIL: the attribute reads need it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* T_OBJECT_EX */
#include <stdint.h>
#include <string.h>

/* Reading one attribute of many objects. A slotted class (NewEvent is a slotted dataclass) keeps
 * each attribute in a member slot at a fixed offset in the instance, which its member descriptor
 * states; objects of exactly that type are read there (a pointer load) instead of through
 * PyObject_GetAttr (~15 ns: the type's attribute lookup and the descriptor call). Anything else
 * (another type, an unset slot, a class without slots, a custom metaclass) uses PyObject_GetAttr. */
typedef struct {
    PyObject *name;
    PyTypeObject *type;
    Py_ssize_t offset; /* -1: no slot to read */
} attribute;

static void attribute_init(attribute *a, PyObject *name, PyObject *first) {
    a->name = name;
    a->type = first == NULL ? NULL : Py_TYPE(first);
    a->offset = -1;
    if (a->type == NULL || Py_TYPE(a->type) != &PyType_Type)
        return;
    PyObject *descr = PyObject_GetAttr((PyObject *)a->type, name);
    if (descr == NULL) {
        PyErr_Clear(); /* PyObject_GetAttr on each object will say what is wrong */
        return;
    }
    if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type == T_OBJECT_EX)
            a->offset = member->offset;
    }
    Py_DECREF(descr);
}

/* A new reference to the attribute's value; NULL with an exception set. */
static PyObject *attribute_get(const attribute *a, PyObject *obj) {
    if (a->offset >= 0 && Py_TYPE(obj) == a->type) {
        PyObject *value = *(PyObject **)((char *)obj + a->offset);
        if (value != NULL)
            return Py_NewRef(value);
    }
    return PyObject_GetAttr(obj, a->name);
}

/* The objects as a tuple of their own (an attribute read may run Python code, which could change
 * a list being read) and how to read attribute `name` of them; NULL with an exception set. */
static PyObject *read_plan(PyObject *objects, PyObject *name, attribute *attr) {
    PyObject *seq = PySequence_Tuple(objects);
    if (seq != NULL)
        attribute_init(attr, name, PyTuple_GET_SIZE(seq) ? PyTuple_GET_ITEM(seq, 0) : NULL);
    return seq;
}

/* A growing byte buffer (a bytearray: Python over-allocates it, and it is returned as it is). */
typedef struct {
    PyObject *bytes;
    Py_ssize_t used;
} growing;

static int grow_append(growing *g, const char *data, Py_ssize_t len) {
    Py_ssize_t need = g->used + len;
    if (need > PyByteArray_GET_SIZE(g->bytes)) {
        Py_ssize_t size = PyByteArray_GET_SIZE(g->bytes);
        while (size < need)
            size = size < 64 ? 64 : size * 2;
        if (PyByteArray_Resize(g->bytes, size) < 0)
            return -1;
    }
    memcpy(PyByteArray_AS_STRING(g->bytes) + g->used, data, len);
    g->used = need;
    return 0;
}

/* Writes offset `at` for row i; 1 when the data went past what int32 offsets can hold. */
static int put_offset(PyObject *offsets, Py_ssize_t i, Py_ssize_t at) {
    if (at > INT32_MAX)
        return 1;
    int32_t value = (int32_t)at;
    memcpy(PyBytes_AS_STRING(offsets) + sizeof(int32_t) * i, &value, sizeof value);
    return 0;
}

/* The value's UTF-8; NULL (no exception) when it is not a str or has no UTF-8. */
static const char *utf8_of(PyObject *value, Py_ssize_t *len) {
    if (!PyUnicode_Check(value))
        return NULL;
    const char *text = PyUnicode_AsUTF8AndSize(value, len);
    if (text == NULL)
        PyErr_Clear(); /* lone surrogates: pyarrow will say so */
    return text;
}

/* memcmp order, then the shorter first: how Arrow orders strings (and Python, for UTF-8) */
static int compare_text(const char *a, Py_ssize_t alen, const char *b, Py_ssize_t blen) {
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c != 0 ? c : (alen > blen) - (alen < blen);
}

static PyObject *strings(PyObject *self, PyObject *args) {
    PyObject *objects, *name;
    int bounds = 0;
    if (!PyArg_ParseTuple(args, "OU|p", &objects, &name, &bounds))
        return NULL;
    attribute attr;
    PyObject *seq = read_plan(objects, name, &attr);
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    PyObject **items = &PyTuple_GET_ITEM(seq, 0);
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, sizeof(int32_t) * (n + 1));
    growing data = {PyByteArray_FromStringAndSize(NULL, 0), 0};
    PyObject *validity = NULL, *first = NULL, *result = NULL, *low = NULL, *high = NULL; /* bounds: held */
    const char *first_text = NULL, *low_text = NULL, *high_text = NULL;
    Py_ssize_t first_len = 0, low_len = 0, high_len = 0, nulls = 0;
    int same = 1, fallback = 0;
    if (offsets == NULL || data.bytes == NULL)
        goto done;
    put_offset(offsets, 0, 0);
    for (Py_ssize_t i = 0; i < n && !fallback; i++) {
        PyObject *value = attribute_get(&attr, items[i]);
        if (value == NULL)
            goto done;
        if (value == Py_None) {
            if (validity == NULL) { /* the first None: every row before it was valid */
                validity = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
                if (validity == NULL) {
                    Py_DECREF(value);
                    goto done;
                }
                memset(PyBytes_AS_STRING(validity), 0xff, (n + 7) / 8);
            }
            PyBytes_AS_STRING(validity)[i / 8] &= (char)~(1 << (i % 8));
            nulls++;
            same = same && (i == 0 || first == Py_None);
        } else {
            Py_ssize_t len;
            const char *text = utf8_of(value, &len);
            if (text == NULL || grow_append(&data, text, len) < 0) {
                fallback = text == NULL;
                Py_DECREF(value);
                if (fallback)
                    break;
                goto done;
            }
            if (i == 0) {
                first_text = text;
                first_len = len;
            } else if (same && value != first) {
                same = first_text != NULL && len == first_len && memcmp(text, first_text, len) == 0;
            }
            if (bounds && (low == NULL || compare_text(text, len, low_text, low_len) < 0)) {
                Py_XSETREF(low, Py_NewRef(value));
                low_text = text;
                low_len = len;
            }
            if (bounds && (high == NULL || compare_text(text, len, high_text, high_len) > 0)) {
                Py_XSETREF(high, Py_NewRef(value));
                high_text = text;
                high_len = len;
            }
        }
        fallback = put_offset(offsets, i + 1, data.used);
        if (i == 0)
            first = value; /* held: first_text points into it */
        else
            Py_DECREF(value);
    }
    if (fallback) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (PyByteArray_Resize(data.bytes, data.used) < 0)
        goto done;
    if (bounds)
        result = Py_BuildValue("(OOOnOOO)", validity ? validity : Py_None, offsets, data.bytes, nulls,
                               same ? Py_True : Py_False, low ? low : Py_None, high ? high : Py_None);
    else
        result = Py_BuildValue("(OOOnO)", validity ? validity : Py_None, offsets, data.bytes, nulls,
                               same ? Py_True : Py_False);
done:
    Py_XDECREF(low);
    Py_XDECREF(high);
    Py_XDECREF(first);
    Py_XDECREF(validity);
    Py_XDECREF(offsets);
    Py_XDECREF(data.bytes);
    Py_DECREF(seq);
    return result;
}

static PyObject *string_lists(PyObject *self, PyObject *args) {
    PyObject *objects, *name;
    if (!PyArg_ParseTuple(args, "OU", &objects, &name))
        return NULL;
    attribute attr;
    PyObject *seq = read_plan(objects, name, &attr);
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    PyObject **items = &PyTuple_GET_ITEM(seq, 0);
    PyObject *list_offsets = PyBytes_FromStringAndSize(NULL, sizeof(int32_t) * (n + 1));
    growing item_offsets = {PyByteArray_FromStringAndSize(NULL, 0), 0};
    growing data = {PyByteArray_FromStringAndSize(NULL, 0), 0};
    PyObject *result = NULL;
    Py_ssize_t count = 0;
    int fallback = 0;
    if (list_offsets == NULL || item_offsets.bytes == NULL || data.bytes == NULL)
        goto done;
    int32_t zero = 0;
    put_offset(list_offsets, 0, 0);
    if (grow_append(&item_offsets, (const char *)&zero, sizeof zero) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < n && !fallback; i++) {
        PyObject *value = attribute_get(&attr, items[i]);
        if (value == NULL)
            goto done;
        if (!PyTuple_Check(value) && !PyList_Check(value)) {
            fallback = 1;
        } else {
            Py_ssize_t m = PySequence_Fast_GET_SIZE(value);
            PyObject **values = PySequence_Fast_ITEMS(value);
            for (Py_ssize_t k = 0; k < m && !fallback; k++) {
                Py_ssize_t len;
                const char *text = utf8_of(values[k], &len);
                if (text == NULL) {
                    fallback = 1;
                    break;
                }
                if (grow_append(&data, text, len) < 0) {
                    Py_DECREF(value);
                    goto done;
                }
                if (data.used > INT32_MAX) {
                    fallback = 1;
                    break;
                }
                int32_t end = (int32_t)data.used;
                if (grow_append(&item_offsets, (const char *)&end, sizeof end) < 0) {
                    Py_DECREF(value);
                    goto done;
                }
            }
            count += m;
            fallback = fallback || put_offset(list_offsets, i + 1, count);
        }
        Py_DECREF(value);
    }
    if (fallback) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (PyByteArray_Resize(item_offsets.bytes, item_offsets.used) < 0 || PyByteArray_Resize(data.bytes, data.used) < 0)
        goto done;
    result = PyTuple_Pack(3, list_offsets, item_offsets.bytes, data.bytes);
done:
    Py_XDECREF(list_offsets);
    Py_XDECREF(item_offsets.bytes);
    Py_XDECREF(data.bytes);
    Py_DECREF(seq);
    return result;
}

static PyObject *nones(PyObject *self, PyObject *args) {
    PyObject *objects, *name;
    if (!PyArg_ParseTuple(args, "OU", &objects, &name))
        return NULL;
    attribute attr;
    PyObject *seq = read_plan(objects, name, &attr);
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq), count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = attribute_get(&attr, PyTuple_GET_ITEM(seq, i));
        if (value == NULL) {
            Py_DECREF(seq);
            return NULL;
        }
        count += value == Py_None;
        Py_DECREF(value);
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(count);
}

static PyMethodDef methods[] = {
    {"strings", strings, METH_VARARGS,
     "strings(objects, name[, bounds]) -> (validity, offsets, data, null_count, same[, least, greatest]), "
     "or None: convert with pyarrow"},
    {"nones", nones, METH_VARARGS, "nones(objects, name) -> how many objects hold None there"},
    {"string_lists", string_lists, METH_VARARGS,
     "string_lists(objects, name) -> (list_offsets, item_offsets, item_data), or None: convert with pyarrow"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_columns", .m_size = -1, .m_methods = methods,
    .m_doc = "Arrow string columns from object attributes, for sealing (see storage/_columns.c).",
};

PyMODINIT_FUNC PyInit__columns(void) {
    return PyModule_Create(&module);
}
