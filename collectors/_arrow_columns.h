/* Arrow columns built in C: a validity bitmap, 32-bit offsets and data for strings, values
 * for integers, handed to Python as bytes (rolloutscope.store.rows.arrow_from_buffers makes the
 * arrays without copying them again). Shared by the compiled OTLP decoder (otlp/_fastdecode.c)
 * and the exporter's span encoder (_fastencode.c). */
#ifndef ROLLOUTSCOPE_ARROW_COLUMNS_H
#define ROLLOUTSCOPE_ARROW_COLUMNS_H
#include "_json_text.h"

enum { T_STR, T_I64, T_I32 };
typedef struct { int type; buf_t data, offsets, valid; int64_t n, nulls; } col_t;

static int col_bit(col_t *c, int set) {
    if ((c->n & 7) == 0) {
        char z = 0;
        if (!buf_put(&c->valid, &z, 1)) return 0;
    }
    if (set) c->valid.p[c->n >> 3] |= (char)(1 << (c->n & 7));
    else c->nulls++;
    c->n++;
    return 1;
}
static int col_str(col_t *c, const char *s, Py_ssize_t n) {
    if (!buf_put(&c->data, s, s ? (size_t)n : 0)) return 0;
    int32_t off = (int32_t)c->data.n;
    return buf_put(&c->offsets, &off, 4) && col_bit(c, s != NULL);
}
static int col_int(col_t *c, int64_t v, int has) {
    if (c->type == T_I32) {
        int32_t x = has ? (int32_t)v : 0;
        if (!buf_put(&c->data, &x, 4)) return 0;
    } else {
        int64_t x = has ? v : 0;
        if (!buf_put(&c->data, &x, 8)) return 0;
    }
    return col_bit(c, has);
}
static void col_init(col_t *c, int type) {
    memset(c, 0, sizeof *c);
    c->type = type;
    if (type == T_STR) { int32_t z = 0; buf_put(&c->offsets, &z, 4); }
}
static void col_free(col_t *c) { free(c->data.p); free(c->offsets.p); free(c->valid.p); }

/* (validity bytes or None, offsets bytes or None, data bytes, null count) */
static PyObject *col_obj(col_t *c) {
    if (c->data.oom || c->offsets.oom || c->valid.oom) return PyErr_NoMemory();
    PyObject *valid = c->nulls ? PyBytes_FromStringAndSize(c->valid.p, (Py_ssize_t)c->valid.n)
                               : (Py_INCREF(Py_None), Py_None);
    PyObject *offs = c->type == T_STR
        ? PyBytes_FromStringAndSize(c->offsets.p, (Py_ssize_t)c->offsets.n)
        : (Py_INCREF(Py_None), Py_None);
    PyObject *data = PyBytes_FromStringAndSize(c->data.p ? c->data.p : "", (Py_ssize_t)c->data.n);
    if (!valid || !offs || !data) {
        Py_XDECREF(valid); Py_XDECREF(offs); Py_XDECREF(data);
        return NULL;
    }
    PyObject *t = Py_BuildValue("(NNNL)", valid, offs, data, (long long)c->nulls);
    return t;
}

#endif
