/* Compiled encode of finished OpenTelemetry SDK spans into Arrow buffers for the spans and
 * span_events tables: what SpanEncoder.encode (exporter.py) and RowBatch.append_span
 * (rolloutscope/store/rows.py) give for the same spans, without a Python object per row or per
 * value on the way to Arrow. Attribute maps of the usual values (str, int, float, bool, None and
 * lists or tuples of them) are written as JSON here, as orjson writes them; any other map goes
 * through orjson itself.
 *
 * It is a fast path, not a second set of rules: a span is taken only when its row is the plain
 * case (every field of the type the SDK gives it, the promoted and copied attributes of their
 * column's type, events' join keys too, no links, no start marker). Any other span is left
 * for the Python encoder, which fits, coerces or rejects it: encode_spans returns its index.
 * tests/collectors/test_fast_encode.py holds the two to identical rows.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_arrow_columns.h"

/* ---- configuration (configure()) -------------------------------------------------------- */
/* the key indices set_keys gives: the row keys first (fit.ROW_KEYS, whose Rule.index names
 * them here), copied keys from COPY_BASE as
 * COPY_BASE + 4 * column + rank (fit.COPIED's columns and each one's keys, in order) */
enum { K_ROLLOUT, K_EP_ROLLOUT, K_ATTEMPT, K_EP_ATTEMPT, K_PROMPT, K_CHECKPOINT, K_KIND,
       K_SHARD, K_RUN, K_MARKER_FOR, N_ROW_KEYS };
#define COPY_BASE 16
#define MAX_COPIES 8
#define N_KEY_SLOTS (COPY_BASE + 4 * MAX_COPIES)
enum { COPY_TEXT, COPY_INT, COPY_AUTHORITY };

static PyObject *g_keys;          /* dict: attribute key -> its index */
static PyObject *g_dumps;         /* orjson.dumps */
static PyTypeObject *g_event, *g_context, *g_status;
static int g_copy_kind[MAX_COPIES], g_n_copies;
static PyObject *s_context, *s_parent, *s_status, *s_resource, *s_name, *s_kind, *s_start,
    *s_end, *s_scope, *s_events, *s_links, *s_attributes, *s_dict, *s_dq, *s_code, *s_desc,
    *s_member_name, *s_ev_name, *s_ev_ts, *s_scope_name, *s_sixty_four;

#define N_SPAN_COLS 28
#define N_EVENT_COLS 12
static const int SPAN_TYPES[N_SPAN_COLS] = {
    T_STR, T_STR, T_STR, T_STR, T_STR, T_STR, T_STR, T_I64, T_I64, T_STR, T_STR,  /* ..message */
    T_STR, T_I32, T_I64, T_STR, T_STR, T_I32,                                    /* promoted */
    T_STR, T_STR, T_STR,                                            /* attributes, resource, scope */
    T_STR, T_STR, T_STR, T_STR, T_STR, T_I32, T_STR, T_STR};                      /* copied */
static const int EVENT_TYPES[N_EVENT_COLS] = {
    T_STR, T_STR, T_STR, T_STR, T_STR, T_I64, T_STR, T_I32, T_I64, T_STR, T_I32, T_STR};

/* ---- one span, gathered before any of it is written ------------------------------------- */
typedef struct { const char *p; Py_ssize_t n; } sv_t;  /* p == NULL: null */
typedef struct { int64_t v; int has; } iv_t;
typedef struct { size_t off, n; int has; } jv_t;  /* JSON text in row_t.scratch */
/* the promoted columns (rows.promoted) */
typedef struct { sv_t rollout, checkpoint, pkind; iv_t attempt, prompt, shard; } promo_t;
typedef struct { sv_t name; int64_t ts; jv_t json; promo_t keys; } ev_t;

typedef struct {
    sv_t run_id, name, kind, service, code, message, resource, scope;
    char trace[32], span[16], parent[16];
    int has_parent;
    int64_t start, end;
    promo_t keys;
    jv_t json;       /* the attributes' JSON */
    buf_t scratch;   /* the JSON texts of the span and its events */
    PyObject *hold;  /* copies the row's values point into (a list, or NULL) */
    sv_t copies[MAX_COPIES];
    iv_t copy_int[MAX_COPIES];
    char *authority;  /* a formatted address:port (malloc) */
    ev_t *events;
    Py_ssize_t n_events, cap_events;
} row_t;

static void row_clear(row_t *r) {
    r->json.has = 0;
    r->scratch.n = 0;
    Py_CLEAR(r->hold);
    free(r->authority);
    r->authority = NULL;
    r->n_events = 0;
}

/* a str's UTF-8 (NULL for None); 0 when it is neither, or not encodable (lone surrogates) */
static int text(PyObject *o, sv_t *out, int none_ok) {
    if (o == Py_None && none_ok) { out->p = NULL; out->n = 0; return 1; }
    if (!PyUnicode_CheckExact(o)) return 0;
    out->p = PyUnicode_AsUTF8AndSize(o, &out->n);
    if (!out->p) { PyErr_Clear(); return 0; }
    return 1;
}
/* an exact int within [lo, hi] */
static int whole(PyObject *o, int64_t lo, int64_t hi, int64_t *out) {
    if (!PyLong_CheckExact(o)) return 0;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) { PyErr_Clear(); return 0; }
    if (v < lo || v > hi) return 0;
    *out = v;
    return 1;
}
static void hex64(char *d, uint64_t v) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--) { d[i] = hex[v & 15]; v >>= 4; }
}
/* an id as format(id, "016x") / "032x" writes it, for ids that fit the width */
static int span_hex(PyObject *o, char *d) {
    if (!PyLong_CheckExact(o)) return 0;
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    hex64(d, v);
    return 1;
}
static int trace_hex(PyObject *o, char *d) {
    if (!PyLong_CheckExact(o)) return 0;
    PyObject *hi = PyNumber_Rshift(o, s_sixty_four);
    if (!hi) { PyErr_Clear(); return 0; }
    unsigned long long h = PyLong_AsUnsignedLongLong(hi);
    Py_DECREF(hi);
    if (h == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    unsigned long long l = PyLong_AsUnsignedLongLongMask(o);
    if (l == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    hex64(d, h);
    hex64(d + 16, l);
    return 1;
}

/* an attribute mapping as a plain dict (borrowed): the dict itself, a BoundedAttributes'
 * backing dict, or a copy of a mappingproxy's (kept alive in *hold); NULL for anything else */
static PyObject *plain(PyObject *attrs, PyObject **hold) {
    if (PyDict_CheckExact(attrs)) return attrs;
    if (Py_IS_TYPE(attrs, &PyDictProxy_Type)) {  /* a read-only view (the replay's events) */
        PyObject *copy = PyDict_New();
        if (!copy || PyDict_Update(copy, attrs) < 0) { Py_XDECREF(copy); PyErr_Clear(); return NULL; }
        if (!*hold && !(*hold = PyList_New(0))) { Py_DECREF(copy); PyErr_Clear(); return NULL; }
        int kept = PyList_Append(*hold, copy);
        Py_DECREF(copy);  /* the row holds it until the row is written */
        if (kept < 0) { PyErr_Clear(); return NULL; }
        return PyDict_CheckExact(copy) ? copy : NULL;
    }
    PyObject *d = PyObject_GetAttr(attrs, s_dict);
    if (!d) { PyErr_Clear(); return NULL; }
    Py_DECREF(d);  /* the mapping keeps it */
    return PyDict_CheckExact(d) ? d : NULL;
}

/* 1: written; 0: a value this writer leaves to orjson (no Python error set) */
static int json_value(buf_t *b, PyObject *v, int depth) {
    if (PyUnicode_CheckExact(v)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(v, &n);
        if (!s) { PyErr_Clear(); return 0; }
        return json_str(b, s, (size_t)n);
    }
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || (x == -1 && PyErr_Occurred())) { PyErr_Clear(); return 0; }
        char tmp[24];
        return buf_put(b, tmp, (size_t)decimal(tmp, x));
    }
    if (v == Py_None) return buf_put(b, "null", 4);
    if (v == Py_True) return buf_put(b, "true", 4);
    if (v == Py_False) return buf_put(b, "false", 5);
    if (PyFloat_CheckExact(v)) return json_double(b, PyFloat_AS_DOUBLE(v));
    if ((PyTuple_CheckExact(v) || PyList_CheckExact(v)) && depth < 4) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
        if (!buf_put(b, "[", 1)) return 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i && !buf_put(b, ",", 1)) return 0;
            if (!json_value(b, PySequence_Fast_GET_ITEM(v, i), depth + 1)) return 0;
        }
        return buf_put(b, "]", 1);
    }
    return 0;
}
static int json_dict(buf_t *b, PyObject *d) {
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    int first = 1;
    if (!buf_put(b, "{", 1)) return 0;
    while (PyDict_Next(d, &pos, &k, &v)) {
        if (!PyUnicode_CheckExact(k)) return 0;
        if (!first && !buf_put(b, ",", 1)) return 0;
        first = 0;
        if (!json_value(b, k, 0) || !buf_put(b, ":", 1) || !json_value(b, v, 0)) return 0;
    }
    return buf_put(b, "}", 1);
}
/* the JSON text of a non-empty plain dict into the row's scratch: 1, or 0 when orjson cannot
 * write it as it is either (the Python encoder then stringifies or rejects); -1 out of memory */
static int json_of(buf_t *scratch, PyObject *d, jv_t *out) {
    size_t start = scratch->n;
    if (json_dict(scratch, d)) {
        *out = (jv_t){start, scratch->n - start, 1};
        return 1;
    }
    if (scratch->oom) return -1;
    scratch->n = start;
    PyObject *bytes = PyObject_CallOneArg(g_dumps, d);
    if (!bytes) { PyErr_Clear(); return 0; }
    int ok = buf_put(scratch, PyBytes_AS_STRING(bytes), (size_t)PyBytes_GET_SIZE(bytes));
    Py_DECREF(bytes);
    if (!ok) return -1;
    *out = (jv_t){start, scratch->n - start, 1};
    return 1;
}

/* the items of a span's events or links: a new list or tuple, or NULL with *none set when
 * there are none; NULL without *none for a container it does not read */
static PyObject *items_of(PyObject *seq, int *none) {
    *none = 0;
    if (seq == Py_None) { *none = 1; return NULL; }
    if (PyList_CheckExact(seq) || PyTuple_CheckExact(seq)) {
        if (PySequence_Fast_GET_SIZE(seq) == 0) { *none = 1; return NULL; }
        Py_INCREF(seq);
        return seq;
    }
    PyObject *dq = PyObject_GetAttr(seq, s_dq);  /* the SDK's BoundedList */
    if (!dq) { PyErr_Clear(); return NULL; }
    Py_ssize_t n = PyObject_Length(dq);
    if (n < 0) { PyErr_Clear(); Py_DECREF(dq); return NULL; }
    if (n == 0) { Py_DECREF(dq); *none = 1; return NULL; }
    PyObject *fast = PySequence_List(dq);
    Py_DECREF(dq);
    if (!fast) PyErr_Clear();
    return fast;
}

/* the promoted columns of a span's or an event's keys (at: the value of each key index, NULL
 * for absent or None); 0 when one is not of its column's type (the Python encoder fits it) */
static int promote(PyObject **at, promo_t *p) {
    PyObject *rollout = at[K_ROLLOUT] ? at[K_ROLLOUT] : at[K_EP_ROLLOUT];
    p->rollout.p = NULL;
    if (rollout && !text(rollout, &p->rollout, 0)) return 0;
    PyObject *attempt = at[K_ATTEMPT] ? at[K_ATTEMPT] : at[K_EP_ATTEMPT];
    p->attempt.has = attempt != NULL;
    if (attempt && !whole(attempt, INT32_MIN, INT32_MAX, &p->attempt.v)) return 0;
    p->prompt.has = at[K_PROMPT] != NULL;
    if (at[K_PROMPT] && !whole(at[K_PROMPT], INT64_MIN, INT64_MAX, &p->prompt.v)) return 0;
    p->checkpoint.p = NULL;
    if (at[K_CHECKPOINT] && !text(at[K_CHECKPOINT], &p->checkpoint, 0)) return 0;
    p->pkind.p = NULL;
    if (at[K_KIND] && !text(at[K_KIND], &p->pkind, 0)) return 0;
    p->shard.has = at[K_SHARD] != NULL;
    if (at[K_SHARD] && !whole(at[K_SHARD], INT32_MIN, INT32_MAX, &p->shard.v)) return 0;
    return 1;
}

typedef struct {
    PyObject *direct, *reads_directly, *resource_fields;
    PyObject *last_resource, *last_fields;   /* the resource's (json, service, run id) */
    PyObject *last_scope, *last_scope_name;
    sv_t res_json, res_service, res_run, scope_name;
    PyObject *last_kind, *last_code;
    sv_t kind_name, code_name;
} enc_t;

static int enum_name(PyObject *member, PyObject **last, sv_t *name) {
    if (member == *last) return 1;
    PyObject *n = PyObject_GetAttr(member, s_member_name);
    if (!n) { PyErr_Clear(); return 0; }
    int ok = text(n, name, 0);
    Py_DECREF(n);  /* the member keeps its name */
    if (ok) *last = member;
    return ok;
}

/* 1: gathered; 0: the Python encoder's; -1: an error */
static int gather(enc_t *e, PyObject *span, row_t *r) {
    PyObject *is = PyDict_GetItemWithError(e->direct, (PyObject *)Py_TYPE(span));
    if (!is) {
        if (PyErr_Occurred()) return -1;
        is = PyObject_CallOneArg(e->reads_directly, (PyObject *)Py_TYPE(span));
        if (!is) return -1;
        Py_DECREF(is);  /* True or False, immortal enough: the dict holds it too */
    }
    if (is != Py_True) return 0;
    int ok = 0;
    PyObject *ctx = NULL, *parent = NULL, *status = NULL, *resource = NULL, *name = NULL,
             *kind = NULL, *start = NULL, *end = NULL, *scope = NULL, *events = NULL,
             *links = NULL, *attributes = NULL, *evs = NULL;
#define FIELD(var, attr) var = PyObject_GetAttr(span, attr); if (!var) { PyErr_Clear(); goto no; }
    FIELD(ctx, s_context) FIELD(parent, s_parent) FIELD(status, s_status)
    FIELD(resource, s_resource) FIELD(name, s_name) FIELD(kind, s_kind) FIELD(start, s_start)
    FIELD(end, s_end) FIELD(scope, s_scope) FIELD(events, s_events) FIELD(links, s_links)
    FIELD(attributes, s_attributes)
    /* the span's own fields */
    if (Py_TYPE(ctx) != g_context || PyTuple_GET_SIZE(ctx) < 2) goto no;
    if (!trace_hex(PyTuple_GET_ITEM(ctx, 0), r->trace)) goto no;
    if (!span_hex(PyTuple_GET_ITEM(ctx, 1), r->span)) goto no;
    r->has_parent = parent != Py_None;
    if (r->has_parent) {
        if (Py_TYPE(parent) != g_context || PyTuple_GET_SIZE(parent) < 2) goto no;
        if (!span_hex(PyTuple_GET_ITEM(parent, 1), r->parent)) goto no;
    }
    if (Py_TYPE(status) != g_status) goto no;
    {
        PyObject *code = PyObject_GetAttr(status, s_code);
        if (!code) { PyErr_Clear(); goto no; }
        int good = enum_name(code, &e->last_code, &e->code_name);
        Py_DECREF(code);  /* an enum member */
        if (!good) goto no;
        r->code = e->code_name;
        PyObject *desc = PyObject_GetAttr(status, s_desc);
        if (!desc) { PyErr_Clear(); goto no; }
        good = text(desc, &r->message, 1);
        Py_DECREF(desc);  /* the status keeps it */
        if (!good) goto no;
    }
    if (!enum_name(kind, &e->last_kind, &e->kind_name)) goto no;
    r->kind = e->kind_name;
    if (!text(name, &r->name, 0)) goto no;
    if (!whole(start, INT64_MIN, INT64_MAX, &r->start)) goto no;
    if (!whole(end, INT64_MIN, INT64_MAX, &r->end)) goto no;
    if (resource != e->last_resource) {
        PyObject *f = PyObject_CallOneArg(e->resource_fields, resource);
        if (!f) goto fail;
        if (!PyTuple_CheckExact(f) || PyTuple_GET_SIZE(f) != 3
                || !text(PyTuple_GET_ITEM(f, 0), &e->res_json, 1)
                || !text(PyTuple_GET_ITEM(f, 1), &e->res_service, 1)
                || !text(PyTuple_GET_ITEM(f, 2), &e->res_run, 1)) {
            Py_DECREF(f);
            e->last_resource = NULL;
            goto no;
        }
        Py_XSETREF(e->last_fields, f);
        Py_INCREF(resource);
        Py_XSETREF(e->last_resource, resource);
    }
    r->resource = e->res_json; r->service = e->res_service; r->run_id = e->res_run;
    if (scope == Py_None) {
        r->scope.p = NULL;
    } else {
        if (scope != e->last_scope) {
            PyObject *sn = PyObject_GetAttr(scope, s_scope_name);
            if (!sn) { PyErr_Clear(); goto no; }
            sv_t v;
            if (!text(sn, &v, 1)) { Py_DECREF(sn); goto no; }
            Py_XSETREF(e->last_scope_name, sn);
            Py_INCREF(scope);
            Py_XSETREF(e->last_scope, scope);
            e->scope_name = v;
        }
        r->scope = e->scope_name;
    }
    /* links: the Python encoder's */
    int none;
    PyObject *lk = items_of(links, &none);
    if (!none) { Py_XDECREF(lk); goto no; }
    /* attributes: promoted, copied, and the JSON */
    PyObject *d = attributes == Py_None ? NULL : plain(attributes, &r->hold);
    if (!d && attributes != Py_None) goto no;
    PyObject *at[N_KEY_SLOTS];
    memset(at, 0, sizeof at);
    if (d && PyDict_GET_SIZE(d)) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(d, &pos, &k, &v)) {
            if (!PyUnicode_CheckExact(k)) goto no;
            PyObject *ix = PyDict_GetItemWithError(g_keys, k);
            if (!ix) { if (PyErr_Occurred()) goto fail; continue; }
            if (v != Py_None) at[PyLong_AsLong(ix)] = v;
        }
        if (at[K_MARKER_FOR]) goto no;
        int got = json_of(&r->scratch, d, &r->json);
        if (got < 0) { PyErr_NoMemory(); goto fail; }
        if (!got) goto no;
    }
    if (!promote(at, &r->keys)) goto no;
    if (at[K_RUN] && !text(at[K_RUN], &r->run_id, 0)) goto no;
    /* copied (rows.copied): a column's first key of its column's type; a later key only where
     * an earlier one is there, or server.address with an int server.port */
    for (int c = 0; c < g_n_copies; c++) {
        PyObject **keys = &at[COPY_BASE + 4 * c];
        r->copies[c].p = NULL;
        r->copy_int[c].has = 0;
        if (g_copy_kind[c] == COPY_INT) {
            if (keys[0]) {
                if (!whole(keys[0], INT32_MIN, INT32_MAX, &r->copy_int[c].v)) goto no;
                r->copy_int[c].has = 1;
            } else if (keys[1] || keys[2] || keys[3]) goto no;
        } else if (g_copy_kind[c] == COPY_TEXT) {
            if (keys[0]) { if (!text(keys[0], &r->copies[c], 0)) goto no; }
            else if (keys[1] || keys[2] || keys[3]) goto no;
        } else {  /* http.host, else server.address ':' server.port */
            if (keys[2] && !PyLong_CheckExact(keys[2])) goto no;
            if (keys[0]) {
                if (!text(keys[0], &r->copies[c], 0)) goto no;
                if (keys[1] && !PyUnicode_CheckExact(keys[1])) goto no;
            } else if (keys[1]) {
                sv_t addr;
                int64_t port;
                if (!text(keys[1], &addr, 0) || !keys[2]
                        || !whole(keys[2], INT64_MIN, INT64_MAX, &port)) goto no;
                char num[24];
                num[0] = ':';
                int len = 1 + decimal(num + 1, (long long)port);
                r->authority = malloc((size_t)addr.n + (size_t)len);
                if (!r->authority) { PyErr_NoMemory(); goto fail; }
                memcpy(r->authority, addr.p, (size_t)addr.n);
                memcpy(r->authority + addr.n, num, (size_t)len);
                r->copies[c].p = r->authority;
                r->copies[c].n = addr.n + len;
            }
        }
    }
    /* events: their join keys are the span's, or their own where they carry them */
    evs = items_of(events, &none);
    if (!none) {
        if (!evs) goto no;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(evs);
        PyObject **items = PySequence_Fast_ITEMS(evs);
        if (n > r->cap_events) {
            ev_t *grown = realloc(r->events, (size_t)n * sizeof *grown);
            if (!grown) { PyErr_NoMemory(); goto fail; }
            r->events = grown; r->cap_events = n;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *ev = items[i];
            if (Py_TYPE(ev) != g_event) goto no;
            ev_t *out = &r->events[r->n_events];
            out->json.has = 0;
            PyObject *en = PyObject_GetAttr(ev, s_ev_name);
            if (!en) { PyErr_Clear(); goto no; }
            int good = text(en, &out->name, 0);
            Py_DECREF(en);  /* the event keeps it */
            if (!good) goto no;
            PyObject *ts = PyObject_GetAttr(ev, s_ev_ts);
            if (!ts) { PyErr_Clear(); goto no; }
            good = whole(ts, INT64_MIN, INT64_MAX, &out->ts);
            Py_DECREF(ts);
            if (!good) goto no;
            PyObject *ea = PyObject_GetAttr(ev, s_attributes);
            if (!ea) { PyErr_Clear(); goto no; }
            PyObject *ed = ea == Py_None ? NULL : plain(ea, &r->hold);
            Py_DECREF(ea);  /* the event keeps it */
            if (ea != Py_None && !ed) goto no;
            r->n_events++;
            out->keys = r->keys;  /* the span's join keys, where the event has none */
            if (ed && PyDict_GET_SIZE(ed)) {
                Py_ssize_t pos = 0;
                PyObject *k, *v, *eat[N_ROW_KEYS];
                int keyed = 0;
                memset(eat, 0, sizeof eat);
                while (PyDict_Next(ed, &pos, &k, &v)) {
                    if (!PyUnicode_CheckExact(k)) goto no;
                    PyObject *ix = PyDict_GetItemWithError(g_keys, k);
                    if (!ix) { if (PyErr_Occurred()) goto fail; continue; }
                    long at_ix = PyLong_AsLong(ix);
                    if (at_ix < N_ROW_KEYS && v != Py_None) { eat[at_ix] = v; keyed = 1; }
                }
                if (keyed) {  /* rows.RowBatch._event_row: the event's own keys first */
                    promo_t own;
                    if (!promote(eat, &own)) goto no;
                    if (own.rollout.p) out->keys.rollout = own.rollout;
                    if (own.attempt.has) out->keys.attempt = own.attempt;
                    if (own.prompt.has) out->keys.prompt = own.prompt;
                    if (own.checkpoint.p) out->keys.checkpoint = own.checkpoint;
                    if (own.shard.has) out->keys.shard = own.shard;
                }
                int got = json_of(&r->scratch, ed, &out->json);
                if (got < 0) { PyErr_NoMemory(); goto fail; }
                if (!got) goto no;
            }
        }
    }
    ok = 1;
    goto done;
no:
    ok = 0;
    goto done;
fail:
    ok = -1;
done:
    Py_XDECREF(ctx); Py_XDECREF(parent); Py_XDECREF(status); Py_XDECREF(resource);
    Py_XDECREF(name); Py_XDECREF(kind); Py_XDECREF(start); Py_XDECREF(end); Py_XDECREF(scope);
    Py_XDECREF(events); Py_XDECREF(links); Py_XDECREF(attributes); Py_XDECREF(evs);
    return ok;
}

static inline sv_t sv_json(row_t *r, jv_t j) {
    sv_t v = {NULL, 0};
    if (j.has) { v.p = r->scratch.p + j.off; v.n = (Py_ssize_t)j.n; }
    return v;
}
static inline int put_sv(col_t *c, sv_t v) { return col_str(c, v.p, v.n); }

static Py_ssize_t row_bytes(row_t *r) {
    Py_ssize_t n = r->run_id.n + 64 + r->name.n + r->kind.n + r->service.n + r->code.n
        + r->message.n + r->resource.n + r->scope.n + r->keys.rollout.n
        + r->keys.checkpoint.n + r->keys.pkind.n + (Py_ssize_t)r->scratch.n;
    for (int c = 0; c < g_n_copies; c++) n += r->copies[c].n;
    for (Py_ssize_t i = 0; i < r->n_events; i++)
        n += 64 + r->run_id.n + r->name.n + r->events[i].name.n
             + r->events[i].keys.rollout.n + r->events[i].keys.checkpoint.n;
    return n;
}

static int put_row(col_t *s, col_t *ev, row_t *r) {
    sv_t trace = {r->trace, 32}, span = {r->span, 16}, parent = {r->has_parent ? r->parent : NULL, 16};
    int ok = put_sv(&s[0], r->run_id) && put_sv(&s[1], trace) && put_sv(&s[2], span)
        && put_sv(&s[3], parent) && put_sv(&s[4], r->name) && put_sv(&s[5], r->kind)
        && put_sv(&s[6], r->service) && col_int(&s[7], r->start, 1)
        && col_int(&s[8], r->end, 1) && put_sv(&s[9], r->code) && put_sv(&s[10], r->message)
        && put_sv(&s[11], r->keys.rollout)
        && col_int(&s[12], r->keys.attempt.v, r->keys.attempt.has)
        && col_int(&s[13], r->keys.prompt.v, r->keys.prompt.has)
        && put_sv(&s[14], r->keys.checkpoint) && put_sv(&s[15], r->keys.pkind)
        && col_int(&s[16], r->keys.shard.v, r->keys.shard.has)
        && put_sv(&s[17], sv_json(r, r->json)) && put_sv(&s[18], r->resource)
        && put_sv(&s[19], r->scope);
    for (int c = 0; ok && c < g_n_copies; c++)
        ok = g_copy_kind[c] == COPY_INT ? col_int(&s[20 + c], r->copy_int[c].v, r->copy_int[c].has)
                                        : put_sv(&s[20 + c], r->copies[c]);
    for (Py_ssize_t i = 0; ok && i < r->n_events; i++) {
        ev_t *e = &r->events[i];
        ok = put_sv(&ev[0], r->run_id) && put_sv(&ev[1], trace) && put_sv(&ev[2], span)
            && put_sv(&ev[3], r->name) && put_sv(&ev[4], e->name) && col_int(&ev[5], e->ts, 1)
            && put_sv(&ev[6], e->keys.rollout)
            && col_int(&ev[7], e->keys.attempt.v, e->keys.attempt.has)
            && col_int(&ev[8], e->keys.prompt.v, e->keys.prompt.has)
            && put_sv(&ev[9], e->keys.checkpoint)
            && col_int(&ev[10], e->keys.shard.v, e->keys.shard.has)
            && put_sv(&ev[11], sv_json(r, e->json));
    }
    return ok;
}

/* encode_spans(spans, direct, reads_directly, resource_fields)
 *   -> (span_columns, n_spans, event_columns, n_events, left)
 * span_columns / event_columns: a (validity, offsets, data, null count) per column of the
 * spans / span_events table; left: the indices of the spans left to the Python encoder. */
static PyObject *encode_spans(PyObject *self, PyObject *args) {
    PyObject *spans;
    enc_t e;
    memset(&e, 0, sizeof e);
    if (!PyArg_ParseTuple(args, "OO!OO", &spans, &PyDict_Type, &e.direct, &e.reads_directly,
                          &e.resource_fields))
        return NULL;
    if (!g_keys) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(spans, "spans must be a sequence");
    if (!seq) return NULL;
    col_t s[N_SPAN_COLS], ev[N_EVENT_COLS];
    for (int i = 0; i < N_SPAN_COLS; i++) col_init(&s[i], SPAN_TYPES[i]);
    for (int i = 0; i < N_EVENT_COLS; i++) col_init(&ev[i], EVENT_TYPES[i]);
    PyObject *left = PyList_New(0), *result = NULL;
    row_t r;
    memset(&r, 0, sizeof r);
    Py_ssize_t total = 0;
    if (!left) goto out;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        int got = gather(&e, items[i], &r);
        if (got < 0) { row_clear(&r); goto out; }
        if (got) {
            Py_ssize_t bytes = row_bytes(&r);
            if (total + bytes >= INT32_MAX) got = 0;  /* Arrow's 32-bit offsets */
            else total += bytes;
        }
        if (got && !put_row(s, ev, &r)) { row_clear(&r); PyErr_NoMemory(); goto out; }
        row_clear(&r);
        if (!got) {
            PyObject *ix = PyLong_FromSsize_t(i);
            if (!ix || PyList_Append(left, ix) < 0) { Py_XDECREF(ix); goto out; }
            Py_DECREF(ix);
        }
    }
    PyObject *sc = PyList_New(N_SPAN_COLS), *ec = PyList_New(N_EVENT_COLS);
    if (!sc || !ec) { Py_XDECREF(sc); Py_XDECREF(ec); goto out; }
    for (int i = 0; i < N_SPAN_COLS; i++) {
        PyObject *o = col_obj(&s[i]);
        if (!o) { Py_DECREF(sc); Py_DECREF(ec); goto out; }
        PyList_SET_ITEM(sc, i, o);
    }
    for (int i = 0; i < N_EVENT_COLS; i++) {
        PyObject *o = col_obj(&ev[i]);
        if (!o) { Py_DECREF(sc); Py_DECREF(ec); goto out; }
        PyList_SET_ITEM(ec, i, o);
    }
    result = Py_BuildValue("(NLNLO)", sc, (long long)s[0].n, ec, (long long)ev[0].n, left);
out:
    free(r.events);
    free(r.scratch.p);
    for (int i = 0; i < N_SPAN_COLS; i++) col_free(&s[i]);
    for (int i = 0; i < N_EVENT_COLS; i++) col_free(&ev[i]);
    Py_XDECREF(left);
    Py_DECREF(seq);
    Py_XDECREF(e.last_resource); Py_XDECREF(e.last_fields);
    Py_XDECREF(e.last_scope); Py_XDECREF(e.last_scope_name);
    return result;
}

/* configure(keys: dict[str, int], copy_kinds: tuple[int, ...], event_type, context_type,
 *           status_type, dumps) */
static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *keys, *kinds, *event, *context, *status, *dumps;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O", &PyDict_Type, &keys, &PyTuple_Type, &kinds,
                          &PyType_Type, &event, &PyType_Type, &context, &PyType_Type, &status,
                          &dumps))
        return NULL;
    Py_ssize_t nk = PyTuple_GET_SIZE(kinds);
    if (nk > MAX_COPIES) {
        PyErr_Format(PyExc_ValueError, "at most %d copied columns", MAX_COPIES);
        return NULL;
    }
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(keys, &pos, &k, &v)) {
        long ix = PyLong_AsLong(v);
        if (ix == -1 && PyErr_Occurred()) return NULL;
        if (!PyUnicode_CheckExact(k) || ix < 0 || ix >= N_KEY_SLOTS) {
            PyErr_SetString(PyExc_ValueError, "keys: str -> an index below 48");
            return NULL;
        }
    }
    if (!PyType_IsSubtype((PyTypeObject *)context, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "the span context type must be a tuple");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nk; i++) {
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(kinds, i));
        if (kind == -1 && PyErr_Occurred()) return NULL;
        g_copy_kind[i] = (int)kind;
    }
    if (nk + 20 != N_SPAN_COLS) {
        PyErr_Format(PyExc_ValueError, "expected %d copied columns", N_SPAN_COLS - 20);
        return NULL;
    }
    g_n_copies = (int)nk;
    Py_INCREF(keys); Py_XSETREF(g_keys, keys);
    Py_INCREF(dumps); Py_XSETREF(g_dumps, dumps);
    Py_INCREF(event); Py_XSETREF(g_event, (PyTypeObject *)event);
    Py_INCREF(context); Py_XSETREF(g_context, (PyTypeObject *)context);
    Py_INCREF(status); Py_XSETREF(g_status, (PyTypeObject *)status);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"encode_spans", encode_spans, METH_VARARGS,
     "encode_spans(spans, direct, reads_directly, resource_fields) -> (span_columns, n_spans, "
     "event_columns, n_events, left)"},
    {"configure", configure, METH_VARARGS,
     "configure(keys, copy_kinds, event_type, context_type, status_type, dumps)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastencode", "Compiled encode of SDK spans (see exporter.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastencode(void) {
    struct { PyObject **var; const char *name; } names[] = {
        {&s_context, "_context"}, {&s_parent, "_parent"}, {&s_status, "_status"},
        {&s_resource, "_resource"}, {&s_name, "_name"}, {&s_kind, "_kind"},
        {&s_start, "_start_time"}, {&s_end, "_end_time"}, {&s_scope, "_instrumentation_scope"},
        {&s_events, "_events"}, {&s_links, "_links"}, {&s_attributes, "_attributes"},
        {&s_dict, "_dict"}, {&s_dq, "_dq"}, {&s_code, "_status_code"},
        {&s_desc, "_description"}, {&s_member_name, "_name_"}, {&s_ev_name, "_name"},
        {&s_ev_ts, "_timestamp"}, {&s_scope_name, "name"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        *names[i].var = PyUnicode_InternFromString(names[i].name);
        if (!*names[i].var) return NULL;
    }
    s_sixty_four = PyLong_FromLong(64);
    if (!s_sixty_four) return NULL;
    return PyModule_Create(&module);
}
