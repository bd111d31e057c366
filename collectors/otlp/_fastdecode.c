/* Compiled decode of an OTLP ExportTraceServiceRequest (protobuf) into what RowBatch keeps for
 * the spans (Arrow buffers per column), span_events and span_links tables (tuples per row).
 *
 * It reads the protobuf wire format directly and writes each attribute map as its JSON text
 * (the text orjson gives for the dict the Python decoder builds) and each span's values
 * straight into Arrow buffers, so no Python object is made per span, attribute or value; the
 * walk over the body runs without the GIL.
 *
 * It is a fast path, not a second set of rules: it takes a request only when every span in it
 * is stored as sent. Whenever the reference decoder (decode.py) would reject, coerce, dedupe or
 * refuse something, or the body holds anything this file does not model (an unknown field of
 * a known message, a value kind it does not encode, a malformed encoding), it declines and
 * returns None, and the caller decodes the same body with the reference decoder, which then
 * produces the rejections, partial-success messages and errors. tests/collectors/
 * test_fast_decode.py holds the two to identical rows and identical outcomes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../_arrow_columns.h"

typedef struct { void *p; size_t n, cap, size; int oom; } vec_t;
static void *vec_push(vec_t *v) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        void *p = realloc(v->p, cap * v->size);
        if (!p) { v->oom = 1; return NULL; }
        v->p = p; v->cap = cap;
    }
    void *slot = (char *)v->p + v->n * v->size;
    memset(slot, 0, v->size);
    v->n++;
    return slot;
}

/* ---- wire format ------------------------------------------------------------------------ */
typedef struct { const uint8_t *p; size_t n; } slice_t;
typedef struct { const uint8_t *p, *end; } rd_t;

static inline int rd_varint(rd_t *r, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->p >= r->end) return 0;
        uint8_t b = *r->p++;
        if (shift == 63 && b > 1) return 0;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) { *out = v; return 1; }
    }
    return 0;
}
static inline int rd_fixed64(rd_t *r, uint64_t *out) {
    if (r->end - r->p < 8) return 0;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | r->p[i];
    r->p += 8; *out = v;
    return 1;
}
static inline int rd_len(rd_t *r, slice_t *out) {
    uint64_t n;
    if (!rd_varint(r, &n) || n > (uint64_t)(r->end - r->p)) return 0;
    out->p = r->p; out->n = (size_t)n; r->p += n;
    return 1;
}
/* the next field's number and wire type; 0 at the end, -1 when malformed */
static inline int rd_tag(rd_t *r, uint32_t *field, int *wt) {
    if (r->p >= r->end) return 0;
    uint64_t tag;
    if (!rd_varint(r, &tag) || tag > 0xffffffffu) return -1;
    *field = (uint32_t)(tag >> 3); *wt = (int)(tag & 7);
    if (*field == 0) return -1;
    return 1;
}
/* skip a field of a number this file does not model */
static int rd_skip(rd_t *r, int wt) {
    uint64_t v; slice_t s;
    switch (wt) {
    case 0: return rd_varint(r, &v);
    case 1: if (r->end - r->p < 8) return 0; r->p += 8; return 1;
    case 2: return rd_len(r, &s);
    case 5: if (r->end - r->p < 4) return 0; r->p += 4; return 1;
    default: return 0; /* groups: decline */
    }
}

/* strict UTF-8 (what protobuf requires of a string field); returns code points or -1 */
static long long utf8_chars(const uint8_t *s, size_t n) {
    long long chars = 0;
    size_t i = 0;
    while (i < n) {
        uint64_t w;
        if (i + 8 <= n && (memcpy(&w, s + i, 8), !(w & 0x8080808080808080ULL))) {
            i += 8; chars += 8;  /* eight ASCII bytes at a time */
            continue;
        }
        uint8_t c = s[i];
        if (c < 0x80) { i++; chars++; continue; }
        if (c >= 0xc2 && c <= 0xdf) {
            if (i + 1 >= n || (s[i + 1] & 0xc0) != 0x80) return -1;
            i += 2;
        } else if (c >= 0xe0 && c <= 0xef) {
            if (i + 2 >= n || (s[i + 1] & 0xc0) != 0x80 || (s[i + 2] & 0xc0) != 0x80) return -1;
            if (c == 0xe0 && s[i + 1] < 0xa0) return -1;        /* overlong */
            if (c == 0xed && s[i + 1] >= 0xa0) return -1;       /* surrogate */
            i += 3;
        } else if (c >= 0xf0 && c <= 0xf4) {
            if (i + 3 >= n || (s[i + 1] & 0xc0) != 0x80 || (s[i + 2] & 0xc0) != 0x80
                || (s[i + 3] & 0xc0) != 0x80) return -1;
            if (c == 0xf0 && s[i + 1] < 0x90) return -1;        /* overlong */
            if (c == 0xf4 && s[i + 1] >= 0x90) return -1;       /* past U+10FFFF */
            i += 4;
        } else {
            return -1;
        }
        chars++;
    }
    return chars;
}
static inline int utf8_ok(slice_t s) { return utf8_chars(s.p, s.n) >= 0; }

/* ---- JSON as orjson writes it ----------------------------------------------------------- */
static int json_hex(buf_t *b, slice_t s) {
    static const char hex[] = "0123456789abcdef";
    if (!buf_reserve(b, 2 * s.n + 2)) return 0;
    b->p[b->n++] = '"';
    for (size_t i = 0; i < s.n; i++) {
        b->p[b->n++] = hex[s.p[i] >> 4];
        b->p[b->n++] = hex[s.p[i] & 15];
    }
    b->p[b->n++] = '"';
    return 1;
}
static int json_int(buf_t *b, int64_t v) {
    char tmp[24];
    return buf_put(b, tmp, (size_t)decimal(tmp, (long long)v));
}
/* ---- limits and keys -------------------------------------------------------------------- */
typedef struct {
    uint64_t max_items, max_attrs, max_bytes, max_events, max_links;
} limits_t;

/* the promoted keys (fit.INDEXED_KEYS, whose Rule.index names them here), then the copied ones
 * (fit.COPIED) */
enum { K_ROLLOUT, K_EP_ROLLOUT, K_ATTEMPT, K_EP_ATTEMPT, K_PROMPT, K_CHECKPOINT, K_KIND,
       K_SHARD, K_RUN, K_MARKER_FOR, K_SERVICE,
       K_DEADLINE_KIND, K_DEADLINE_OUTCOME, K_ROLLOUT_OUTCOME, K_FAILURE_CLASS,
       K_FAILURE_REASON, K_HTTP_STATUS, K_HTTP_STATUS_OLD, K_URL_FULL, K_HTTP_URL_OLD,
       K_HTTP_HOST, K_SERVER_ADDRESS, K_SERVER_PORT, N_KEYS };

/* The copied attributes' columns, in the spans table's order (fit.COPIED): a column copies
 * the first of its keys present (not null) when it has the column's kind, else is NULL. */
enum { COPY_TEXT, COPY_INT, COPY_AUTHORITY };
typedef struct { int kind, n, keys[3]; } copy_t;
static const copy_t g_copies[] = {
    {COPY_TEXT, 1, {K_DEADLINE_KIND}},
    {COPY_TEXT, 1, {K_DEADLINE_OUTCOME}},
    {COPY_TEXT, 1, {K_ROLLOUT_OUTCOME}},
    {COPY_TEXT, 1, {K_FAILURE_CLASS}},
    {COPY_TEXT, 1, {K_FAILURE_REASON}},
    {COPY_INT, 2, {K_HTTP_STATUS, K_HTTP_STATUS_OLD}},
    {COPY_TEXT, 2, {K_URL_FULL, K_HTTP_URL_OLD}},
    {COPY_AUTHORITY, 3, {K_HTTP_HOST, K_SERVER_ADDRESS, K_SERVER_PORT}},
};
#define N_COPIES ((int)(sizeof g_copies / sizeof *g_copies))
#define SPAN_COLUMNS (20 + N_COPIES)
static char *g_keys[N_KEYS];
static size_t g_key_len[N_KEYS];
static int g_keys_set = 0;
/* the keys by length: every attribute key of every span is looked up, and most match none,
 * so a lookup compares only the keys of its own length (a list through g_next_of_len) */
#define MAX_KEY_LEN 64
static signed char g_first_of_len[MAX_KEY_LEN + 1], g_next_of_len[N_KEYS];

static int key_index(slice_t k) {
    if (k.n > MAX_KEY_LEN) return -1;
    for (int i = g_first_of_len[k.n]; i >= 0; i = g_next_of_len[i])
        if (memcmp(g_keys[i], k.p, k.n) == 0) return i;
    return -1;
}

/* ---- attribute maps --------------------------------------------------------------------- */
/* What a promoted or copied key held, for the row's own columns. kind: 0 absent or null,
 * 1 string, 2 int, 3 anything else (a bool, a finite double, an array or map), 4 a NaN or an
 * infinity (null in the JSON, but not absent to the promoted keys' rules), 5 bytes (the JSON's
 * hex digits) */
typedef struct { int kind; slice_t s; int64_t i; } promo_t;

/* doubles cannot be formatted without the GIL: pass one writes a placeholder byte (0x01,
 * which valid JSON text never holds raw) followed by the 8 raw bytes, and pass two replaces
 * it */
#define DOUBLE_MARK 0x01

typedef struct {
    const limits_t *lim;
    buf_t *json;
    int has_double;
} ctx_t;

static int encode_map(ctx_t *c, slice_t kvs_body[], size_t n, promo_t *promo, int depth);

/* one AnyValue body as JSON; 0 = decline */
static int encode_value(ctx_t *c, slice_t v, promo_t *p, int depth) {
    rd_t r = {v.p, v.p + v.n};
    uint32_t f; int wt, t;
    int seen = 0;
    int kind = 0;
    slice_t s = {0}; uint64_t u = 0;
    while ((t = rd_tag(&r, &f, &wt)) == 1) {
        if (f >= 1 && f <= 8) {
            if (seen) return 0; /* a oneof set twice: protobuf's merge rules, left to Python */
            seen = 1; kind = (int)f;
            if (f == 1 || f == 5 || f == 6 || f == 7) {
                if (wt != 2 || !rd_len(&r, &s)) return 0;
            } else if (f == 2 || f == 3) {
                if (wt != 0 || !rd_varint(&r, &u)) return 0;
            } else if (f == 4) {
                if (wt != 1 || !rd_fixed64(&r, &u)) return 0;
            } else {
                return 0; /* string_value_strindex */
            }
        } else if (!rd_skip(&r, wt)) {
            return 0;
        } else {
            return 0; /* an unknown field is kept by protobuf and counts in ByteSize */
        }
    }
    if (t < 0) return 0;
    buf_t *b = c->json;
    switch (kind) {
    case 0: return buf_put(b, "null", 4);
    case 1: {
        long long chars = utf8_chars(s.p, s.n);
        if (chars < 0 || (uint64_t)chars > c->lim->max_bytes) return 0;
        if (p) { p->kind = 1; p->s = s; }
        return json_str(b, (const char *)s.p, s.n);
    }
    case 2:
        if (p) p->kind = 3; /* a bool: never a column's value */
        return u ? buf_put(b, "true", 4) : buf_put(b, "false", 5);
    case 3:
        if (p) { p->kind = 2; p->i = (int64_t)u; }
        return json_int(b, (int64_t)u);
    case 4: {
        if (p) {
            double d;
            memcpy(&d, &u, 8);
            p->kind = d != d || d - d != 0 ? 4 : 3;
        }
        c->has_double = 1;
        if (!buf_ch(b, DOUBLE_MARK)) return 0;
        return buf_put(b, &u, 8);
    }
    case 5: case 6: {
        if (p) p->kind = 3;
        if (depth >= 8 || v.n > c->lim->max_bytes) return 0;
        /* the elements (ArrayValue.values / KeyValueList.values, field 1) */
        rd_t a = {s.p, s.p + s.n};
        slice_t items[64]; size_t count = 0;
        slice_t *list = items; size_t cap = 64;
        int ok = 1;
        while ((t = rd_tag(&a, &f, &wt)) == 1) {
            slice_t item;
            if (f != 1 || wt != 2 || !rd_len(&a, &item)) { ok = 0; break; }
            if (count == cap) {
                size_t ncap = cap * 2;
                slice_t *nl = malloc(ncap * sizeof *nl);
                if (!nl) { ok = 0; break; }
                memcpy(nl, list, count * sizeof *nl);
                if (list != items) free(list);
                list = nl; cap = ncap;
            }
            list[count++] = item;
        }
        if (t < 0) ok = 0;
        if (ok && count > c->lim->max_attrs) ok = 0;
        if (ok) {
            if (kind == 6) {
                ok = encode_map(c, list, count, NULL, depth + 1);
            } else {
                ok = buf_ch(b, '[');
                for (size_t i = 0; ok && i < count; i++) {
                    if (i) ok = buf_ch(b, ',');
                    if (ok) ok = encode_value(c, list[i], NULL, depth + 1);
                }
                if (ok) ok = buf_ch(b, ']');
            }
        }
        if (list != items) free(list);
        return ok;
    }
    case 7:
        if (p) { p->kind = 5; p->s = s; }
        if (s.n > c->lim->max_bytes) return 0;
        return json_hex(b, s);
    }
    return 0;
}

typedef struct { slice_t key, value; int has_value; } kv_t;

static int parse_kv(slice_t body, kv_t *kv) {
    rd_t r = {body.p, body.p + body.n};
    uint32_t f; int wt, t;
    int has_key = 0;
    memset(kv, 0, sizeof *kv);
    while ((t = rd_tag(&r, &f, &wt)) == 1) {
        if (f == 1) {
            if (wt != 2 || !rd_len(&r, &kv->key)) return 0;
            has_key = 1;
        } else if (f == 2) {
            if (wt != 2 || kv->has_value || !rd_len(&r, &kv->value)) return 0;
            kv->has_value = 1;
        } else {
            return 0; /* key_strindex or unknown */
        }
    }
    (void)has_key;
    return t == 0 && utf8_ok(kv->key);
}

static int slice_cmp(const void *a, const void *b) {
    const slice_t *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->p, y->p, n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

/* The KeyValue bodies in ``kvs`` as one JSON object (or nothing at all when empty: the caller
 * stores NULL). With ``promo`` (indexed by key_index), what the promoted keys held. */
static int encode_map(ctx_t *c, slice_t kvs[], size_t n, promo_t *promo, int depth) {
    buf_t *b = c->json;
    if (n > c->lim->max_attrs) return 0;
    kv_t small[32];
    kv_t *kv = n <= 32 ? small : malloc(n * sizeof *kv);
    if (!kv) return 0;
    int ok = 1;
    for (size_t i = 0; ok && i < n; i++) ok = parse_kv(kvs[i], &kv[i]);
    /* a key twice: a dict keeps the last value at the first one's place; left to Python */
    if (ok && n > 1) {
        if (n <= 16) {
            for (size_t i = 0; ok && i < n; i++)
                for (size_t j = i + 1; j < n; j++)
                    if (kv[i].key.n == kv[j].key.n
                        && memcmp(kv[i].key.p, kv[j].key.p, kv[i].key.n) == 0) { ok = 0; break; }
        } else {
            slice_t *keys = malloc(n * sizeof *keys);
            if (!keys) ok = 0;
            else {
                for (size_t i = 0; i < n; i++) keys[i] = kv[i].key;
                qsort(keys, n, sizeof *keys, slice_cmp);
                for (size_t i = 1; i < n; i++) if (!slice_cmp(&keys[i - 1], &keys[i])) ok = 0;
                free(keys);
            }
        }
    }
    if (ok && depth == 0 && n == 0) goto done;
    if (ok) ok = buf_ch(b, '{');
    for (size_t i = 0; ok && i < n; i++) {
        if (i) ok = buf_ch(b, ',');
        if (ok) ok = json_str(b, (const char *)kv[i].key.p, kv[i].key.n);
        if (ok) ok = buf_ch(b, ':');
        promo_t *p = NULL;
        if (ok && promo) {
            int k = key_index(kv[i].key);
            if (k >= 0) p = &promo[k];
        }
        if (ok) {
            if (kv[i].has_value) ok = encode_value(c, kv[i].value, p, depth);
            else ok = buf_put(b, "null", 4);
        }
    }
    if (ok) ok = buf_ch(b, '}');
done:
    if (kv != small) free(kv);
    return ok && !b->oom;
}

/* Collects the KeyValue bodies of repeated field ``field`` of a message while the caller
 * walks it. */
typedef struct { slice_t *p; size_t n, cap; } kvlist_t;
static int kvlist_add(kvlist_t *l, slice_t s) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        slice_t *p = realloc(l->p, cap * sizeof *p);
        if (!p) return 0;
        l->p = p; l->cap = cap;
    }
    l->p[l->n++] = s;
    return 1;
}

/* a map encoded into the arena: [off, off+len), or len == (size_t)-1 for NULL */
typedef struct { size_t off, len; } text_t;
#define NO_TEXT ((size_t)-1)

static int encode_attrs(ctx_t *c, kvlist_t *l, promo_t *promo, text_t *out) {
    size_t start = c->json->n;
    if (!encode_map(c, l->p, l->n, promo, 0)) return 0;
    out->off = start;
    out->len = c->json->n == start ? NO_TEXT : c->json->n - start;
    return 1;
}

/* ---- records of pass one ---------------------------------------------------------------- */
typedef struct { slice_t service, run_id; int has_service, has_run; text_t json; } res_t;
typedef struct {
    size_t res;
    slice_t trace_id, span_id, parent, name, status_msg, scope;
    int has_scope;
    int kind, code;
    uint64_t start, end;
    text_t attrs;
    promo_t promo[N_KEYS];
    size_t ev_first, ev_n, lk_first, lk_n;
} span_t;
typedef struct { uint64_t time; slice_t name; text_t attrs; } event_t;
typedef struct { slice_t trace_id, span_id; text_t attrs; } link_t;

typedef struct {
    limits_t lim;
    buf_t json;
    vec_t res, spans, events, links;
    int has_double;
    uint64_t total;
} walk_t;

/* a promoted value as its column takes it unchanged, else 0 (the reference would coerce or
 * reject it) */
static int promo_ok(promo_t *p) {
    if (p[K_MARKER_FOR].kind) return 0;
    int text[] = {K_ROLLOUT, K_EP_ROLLOUT, K_CHECKPOINT, K_KIND, K_RUN};
    for (size_t i = 0; i < sizeof text / sizeof *text; i++)
        if (p[text[i]].kind > 1) return 0;
    int int32[] = {K_ATTEMPT, K_EP_ATTEMPT, K_SHARD};
    for (size_t i = 0; i < sizeof int32 / sizeof *int32; i++) {
        promo_t *q = &p[int32[i]];
        if (q->kind != 0 && q->kind != 2) return 0;
        if (q->kind == 2 && (q->i < INT32_MIN || q->i > INT32_MAX)) return 0;
    }
    if (p[K_PROMPT].kind != 0 && p[K_PROMPT].kind != 2) return 0;
    /* the episode's keys are used only when the main key is absent; a main key present
     * hides an unfit episode value, which the reference never looks at */
    return 1;
}

static int all_zero(slice_t s) {
    for (size_t i = 0; i < s.n; i++) if (s.p[i]) return 0;
    return 1;
}

static int walk_event(walk_t *w, ctx_t *c, slice_t body) {
    event_t *ev = vec_push(&w->events);
    if (!ev) return 0;
    rd_t r = {body.p, body.p + body.n};
    uint32_t f; int wt, t; uint64_t u;
    kvlist_t attrs = {0};
    int ok = 1;
    while (ok && (t = rd_tag(&r, &f, &wt)) == 1) {
        slice_t s;
        switch (f) {
        case 1: ok = wt == 1 && rd_fixed64(&r, &ev->time); break;
        case 2: ok = wt == 2 && rd_len(&r, &ev->name) && utf8_ok(ev->name); break;
        case 3: ok = wt == 2 && rd_len(&r, &s) && kvlist_add(&attrs, s); break;
        case 4: ok = wt == 0 && rd_varint(&r, &u); break;
        default: ok = 0;
        }
    }
    if (ok && t < 0) ok = 0;
    if (ok && ev->time > (uint64_t)INT64_MAX) ok = 0;
    if (ok) {
        promo_t promo[N_KEYS];
        memset(promo, 0, sizeof promo);
        ok = encode_attrs(c, &attrs, promo, &ev->attrs);
        /* an event's own join keys override its span's: left to Python (the copied keys
         * make no column of an event) */
        for (int k = 0; ok && k < K_SERVICE; k++)
            if (promo[k].kind) ok = 0;
        /* a key of the row set with a null value still sends the reference the long way */
    }
    free(attrs.p);
    return ok;
}

static int walk_link(walk_t *w, ctx_t *c, slice_t body) {
    link_t *lk = vec_push(&w->links);
    if (!lk) return 0;
    rd_t r = {body.p, body.p + body.n};
    uint32_t f; int wt, t; uint64_t u;
    kvlist_t attrs = {0};
    int ok = 1;
    while (ok && (t = rd_tag(&r, &f, &wt)) == 1) {
        slice_t s;
        switch (f) {
        case 1: ok = wt == 2 && rd_len(&r, &lk->trace_id); break;
        case 2: ok = wt == 2 && rd_len(&r, &lk->span_id); break;
        case 3: ok = wt == 2 && rd_len(&r, &s) && utf8_ok(s); break;
        case 4: ok = wt == 2 && rd_len(&r, &s) && kvlist_add(&attrs, s); break;
        case 5: ok = wt == 0 && rd_varint(&r, &u); break;
        case 6: ok = wt == 5 && r.end - r.p >= 4; r.p += ok ? 4 : 0; break;
        default: ok = 0;
        }
    }
    if (ok && t < 0) ok = 0;
    if (ok && (lk->trace_id.n != 16 || lk->span_id.n != 8)) ok = 0;
    if (ok) ok = encode_attrs(c, &attrs, NULL, &lk->attrs);
    free(attrs.p);
    return ok;
}

static int walk_status(span_t *sp, slice_t body) {
    rd_t r = {body.p, body.p + body.n};
    uint32_t f; int wt, t; uint64_t u;
    while ((t = rd_tag(&r, &f, &wt)) == 1) {
        if (f == 2) {
            if (wt != 2 || !rd_len(&r, &sp->status_msg) || !utf8_ok(sp->status_msg)) return 0;
        } else if (f == 3) {
            /* a negative or out-of-range enum: the reference's indexing decides */
            if (wt != 0 || !rd_varint(&r, &u) || u > 0x7fffffffu) return 0;
            sp->code = (int)u;
        } else {
            return 0;
        }
    }
    return t == 0;
}

static int walk_span(walk_t *w, ctx_t *c, slice_t body, size_t res, slice_t scope,
                     int has_scope) {
    span_t *sp = vec_push(&w->spans);
    if (!sp) return 0;
    sp->res = res; sp->scope = scope; sp->has_scope = has_scope;
    rd_t r = {body.p, body.p + body.n};
    uint32_t f; int wt, t; uint64_t u = 0;
    kvlist_t attrs = {0};
    vec_t ev_bodies = {.size = sizeof(slice_t)}, lk_bodies = {.size = sizeof(slice_t)};
    int ok = 1, has_status = 0;
    slice_t status = {0};
    while (ok && (t = rd_tag(&r, &f, &wt)) == 1) {
        slice_t s;
        switch (f) {
        case 1: ok = wt == 2 && rd_len(&r, &sp->trace_id); break;
        case 2: ok = wt == 2 && rd_len(&r, &sp->span_id); break;
        case 3: ok = wt == 2 && rd_len(&r, &s) && utf8_ok(s); break;
        case 4: ok = wt == 2 && rd_len(&r, &sp->parent); break;
        case 5: ok = wt == 2 && rd_len(&r, &sp->name) && utf8_ok(sp->name); break;
        case 6:
            ok = wt == 0 && rd_varint(&r, &u) && u <= 0x7fffffffu;
            sp->kind = (int)u;
            break;
        case 7: ok = wt == 1 && rd_fixed64(&r, &sp->start); break;
        case 8: ok = wt == 1 && rd_fixed64(&r, &sp->end); break;
        case 9: ok = wt == 2 && rd_len(&r, &s) && kvlist_add(&attrs, s); break;
        case 10: case 12: case 14: ok = wt == 0 && rd_varint(&r, &u); break;
        case 11: {
            slice_t *e;
            ok = wt == 2 && rd_len(&r, &s) && (e = vec_push(&ev_bodies)) != NULL;
            if (ok) *e = s;
            break;
        }
        case 13: {
            slice_t *e;
            ok = wt == 2 && rd_len(&r, &s) && (e = vec_push(&lk_bodies)) != NULL;
            if (ok) *e = s;
            break;
        }
        case 15: ok = wt == 2 && !has_status && rd_len(&r, &status); has_status = 1; break;
        case 16: ok = wt == 5 && r.end - r.p >= 4; r.p += ok ? 4 : 0; break;
        default: ok = 0;
        }
    }
    if (ok && t < 0) ok = 0;
    /* the reference's validity rules (decode._span_problem): any failure is a rejection */
    if (ok && !(sp->trace_id.n == 16 && sp->span_id.n == 8
                && (sp->parent.n == 0 || sp->parent.n == 8)
                && !all_zero(sp->trace_id) && !all_zero(sp->span_id)
                && sp->start > 0 && sp->start <= sp->end && sp->end <= (uint64_t)INT64_MAX
                && ev_bodies.n <= w->lim.max_events && lk_bodies.n <= w->lim.max_links))
        ok = 0;
    if (ok && has_status) ok = walk_status(sp, status);
    if (ok && (sp->kind < 0 || sp->code < 0)) ok = 0;
    if (ok) ok = encode_attrs(c, &attrs, sp->promo, &sp->attrs) && promo_ok(sp->promo);
    /* pointers into the vectors move as they grow: keep indices */
    size_t span_index = w->spans.n - 1;
    if (ok) {
        ((span_t *)w->spans.p)[span_index].ev_first = w->events.n;
        for (size_t i = 0; ok && i < ev_bodies.n; i++)
            ok = walk_event(w, c, ((slice_t *)ev_bodies.p)[i]);
        sp = &((span_t *)w->spans.p)[span_index];
        sp->ev_n = ev_bodies.n;
        sp->lk_first = w->links.n;
        for (size_t i = 0; ok && i < lk_bodies.n; i++)
            ok = walk_link(w, c, ((slice_t *)lk_bodies.p)[i]);
        sp = &((span_t *)w->spans.p)[span_index];
        sp->lk_n = lk_bodies.n;
    }
    free(attrs.p); free(ev_bodies.p); free(lk_bodies.p);
    return ok && !ev_bodies.oom && !lk_bodies.oom;
}

static int walk_resource(walk_t *w, ctx_t *c, res_t *res, slice_t body) {
    rd_t r = {body.p, body.p + body.n};
    uint32_t f; int wt, t; uint64_t u;
    kvlist_t attrs = {0};
    int ok = 1;
    while (ok && (t = rd_tag(&r, &f, &wt)) == 1) {
        slice_t s;
        if (f == 1) ok = wt == 2 && rd_len(&r, &s) && kvlist_add(&attrs, s);
        else if (f == 2) ok = wt == 0 && rd_varint(&r, &u);
        else ok = 0; /* entity_refs and anything newer */
    }
    if (ok && t < 0) ok = 0;
    promo_t promo[N_KEYS];
    memset(promo, 0, sizeof promo);
    if (ok) ok = encode_attrs(c, &attrs, promo, &res->json);
    /* service.name and nemo.run.id: a string, or absent; anything else is coerced or unfit */
    if (ok && (promo[K_SERVICE].kind > 1 || promo[K_RUN].kind > 1)) ok = 0;
    if (ok) {
        res->has_service = promo[K_SERVICE].kind == 1; res->service = promo[K_SERVICE].s;
        res->has_run = promo[K_RUN].kind == 1; res->run_id = promo[K_RUN].s;
    }
    free(attrs.p);
    (void)w;
    return ok;
}

static int walk_scope(slice_t body, slice_t *name, int *has_name, walk_t *w, ctx_t *c) {
    rd_t r = {body.p, body.p + body.n};
    uint32_t f; int wt, t; uint64_t u;
    kvlist_t attrs = {0};
    int ok = 1;
    while (ok && (t = rd_tag(&r, &f, &wt)) == 1) {
        slice_t s;
        if (f == 1) { ok = wt == 2 && rd_len(&r, name) && utf8_ok(*name); }
        else if (f == 2) ok = wt == 2 && rd_len(&r, &s) && utf8_ok(s);
        else if (f == 3) ok = wt == 2 && rd_len(&r, &s) && kvlist_add(&attrs, s);
        else if (f == 4) ok = wt == 0 && rd_varint(&r, &u);
        else ok = 0;
    }
    if (ok && t < 0) ok = 0;
    /* scope attributes are not stored, but protobuf validates their strings: encode them to
     * apply the same checks, then drop the text */
    if (ok && attrs.n) {
        size_t mark = c->json->n;
        int had = c->has_double;
        text_t ignored;
        ok = encode_attrs(c, &attrs, NULL, &ignored);
        c->json->n = mark; c->has_double = had;
    }
    *has_name = name->n > 0;
    free(attrs.p);
    (void)w;
    return ok;
}

static int walk_scope_spans(walk_t *w, ctx_t *c, size_t res, slice_t body) {
    rd_t r = {body.p, body.p + body.n};
    uint32_t f; int wt, t;
    slice_t scope = {0}, s;
    int has_scope = 0, scope_seen = 0, ok = 1;
    vec_t spans = {.size = sizeof(slice_t)};
    while (ok && (t = rd_tag(&r, &f, &wt)) == 1) {
        if (f == 1) {
            ok = wt == 2 && !scope_seen && rd_len(&r, &s);
            scope_seen = 1;
            if (ok) ok = walk_scope(s, &scope, &has_scope, w, c);
        } else if (f == 2) {
            slice_t *e;
            ok = wt == 2 && rd_len(&r, &s) && (e = vec_push(&spans)) != NULL;
            if (ok) *e = s;
        } else if (f == 3) {
            ok = wt == 2 && rd_len(&r, &s) && utf8_ok(s);
        } else {
            ok = 0;
        }
    }
    if (ok && t < 0) ok = 0;
    w->total += spans.n;
    if (w->total > w->lim.max_items) ok = 0;
    for (size_t i = 0; ok && i < spans.n; i++)
        ok = walk_span(w, c, ((slice_t *)spans.p)[i], res, scope, has_scope);
    free(spans.p);
    return ok && !spans.oom;
}

static int walk_resource_spans(walk_t *w, ctx_t *c, slice_t body) {
    rd_t r = {body.p, body.p + body.n};
    uint32_t f; int wt, t;
    slice_t s, resource = {0};
    int ok = 1, res_seen = 0;
    vec_t scopes = {.size = sizeof(slice_t)};
    while (ok && (t = rd_tag(&r, &f, &wt)) == 1) {
        if (f == 1) {
            ok = wt == 2 && !res_seen && rd_len(&r, &resource);
            res_seen = 1;
        } else if (f == 2) {
            slice_t *e;
            ok = wt == 2 && rd_len(&r, &s) && (e = vec_push(&scopes)) != NULL;
            if (ok) *e = s;
        } else if (f == 3) {
            ok = wt == 2 && rd_len(&r, &s) && utf8_ok(s);
        } else {
            ok = 0;
        }
    }
    if (ok && t < 0) ok = 0;
    res_t *res = ok ? vec_push(&w->res) : NULL;
    if (!res) ok = 0;
    size_t res_index = w->res.n - 1;
    if (ok) ok = walk_resource(w, c, res, resource);
    for (size_t i = 0; ok && i < scopes.n; i++)
        ok = walk_scope_spans(w, c, res_index, ((slice_t *)scopes.p)[i]);
    free(scopes.p);
    return ok && !scopes.oom;
}

static int span_id_cmp(const void *a, const void *b) {
    return memcmp(*(const uint8_t *const *)a, *(const uint8_t *const *)b, 8);
}

/* pass one: no GIL, no Python object */
static int walk_request(walk_t *w, const uint8_t *p, size_t n) {
    ctx_t c = {&w->lim, &w->json, 0};
    rd_t r = {p, p + n};
    uint32_t f; int wt, t;
    int ok = 1;
    while (ok && (t = rd_tag(&r, &f, &wt)) == 1) {
        slice_t s;
        if (f == 1) ok = wt == 2 && rd_len(&r, &s) && walk_resource_spans(w, &c, s);
        else ok = 0;
    }
    if (ok && t < 0) ok = 0;
    w->has_double = c.has_double;
    if (!ok || w->json.oom || w->res.oom || w->spans.oom || w->events.oom || w->links.oom)
        return 0;
    /* a span id twice: the reference dedupes (or keeps a cross-trace collision) */
    if (w->spans.n > 1) {
        const uint8_t **ids = malloc(w->spans.n * sizeof *ids);
        if (!ids) return 0;
        span_t *spans = w->spans.p;
        for (size_t i = 0; i < w->spans.n; i++) ids[i] = spans[i].span_id.p;
        qsort(ids, w->spans.n, sizeof *ids, span_id_cmp);
        for (size_t i = 1; ok && i < w->spans.n; i++)
            if (!memcmp(ids[i - 1], ids[i], 8)) ok = 0;
        free(ids);
    }
    return ok;
}

/* ---- pass two: Arrow buffers for the spans, Python objects for events and links ------- */
static const char *const g_kind_text[6] = {"INTERNAL", "INTERNAL", "SERVER", "CLIENT",
                                           "PRODUCER", "CONSUMER"};
static const char *const g_code_text[3] = {"UNSET", "OK", "ERROR"};

static PyObject *str_of(slice_t s) {
    return PyUnicode_DecodeUTF8((const char *)s.p, (Py_ssize_t)s.n, "strict");
}
static int put_hex(buf_t *b, slice_t s) {
    static const char hex[] = "0123456789abcdef";
    if (!buf_reserve(b, 2 * s.n)) return 0;
    char *d = b->p + b->n;
    for (size_t i = 0; i < s.n; i++) { d[2 * i] = hex[s.p[i] >> 4]; d[2 * i + 1] = hex[s.p[i] & 15]; }
    b->n += 2 * s.n;
    return 1;
}
static PyObject *hex_of(slice_t s) {
    buf_t b = {0};
    if (!put_hex(&b, s)) { free(b.p); return PyErr_NoMemory(); }
    PyObject *o = PyUnicode_FromStringAndSize(b.p ? b.p : "", (Py_ssize_t)b.n);
    free(b.p);
    return o;
}

typedef struct { const char *json; int has_double; } texts_t;

/* the JSON text of a map into b, with any doubles formatted now (the GIL is held) */
static int put_text(buf_t *b, texts_t *t, text_t x) {
    const char *s = t->json + x.off;
    if (!t->has_double || !memchr(s, DOUBLE_MARK, x.len)) return buf_put(b, s, x.len);
    size_t i = 0;
    while (i < x.len) {
        const char *m = memchr(s + i, DOUBLE_MARK, x.len - i);
        size_t upto = m ? (size_t)(m - s) : x.len;
        if (!buf_put(b, s + i, upto - i)) return 0;
        if (!m) break;
        double d; uint64_t u;
        memcpy(&u, m + 1, 8); memcpy(&d, &u, 8);
        if (!json_double(b, d)) return 0;
        i = upto + 9;
    }
    return 1;
}
static PyObject *text_of(texts_t *t, text_t x) {
    if (x.len == NO_TEXT) Py_RETURN_NONE;
    buf_t b = {0};
    PyObject *o = NULL;
    if (put_text(&b, t, x) && !b.oom)
        o = PyUnicode_DecodeUTF8(b.p ? b.p : "", (Py_ssize_t)b.n, "strict");
    else if (!PyErr_Occurred())
        PyErr_NoMemory();
    free(b.p);
    return o;
}
/* a column's value for a JSON text: the text, or NULL for a map that was not there */
static int col_text(col_t *c, texts_t *t, text_t x) {
    if (x.len == NO_TEXT) return col_str(c, NULL, 0);
    if (!put_text(&c->data, t, x)) return 0;
    int32_t off = (int32_t)c->data.n;
    return buf_put(&c->offsets, &off, 4) && col_bit(c, 1);
}
/* a string value (never NULL: an empty string has no bytes to point at) */
static int col_slice(col_t *c, slice_t s) {
    return col_str(c, s.p ? (const char *)s.p : "", (Py_ssize_t)s.n);
}
static int col_null(col_t *c) {
    return c->type == T_STR ? col_str(c, NULL, 0) : col_int(c, 0, 0);
}
static int col_hex(col_t *c, slice_t s) {
    if (!put_hex(&c->data, s)) return 0;
    int32_t off = (int32_t)c->data.n;
    return buf_put(&c->offsets, &off, 4) && col_bit(c, 1);
}

#define SET(tuple, i, expr) do { PyObject *_o = (expr); if (!_o) goto fail; \
                                 PyTuple_SET_ITEM(tuple, i, _o); } while (0)
#define NEWREF(o) (Py_INCREF(o), (o))

/* a promoted value into its column: promo_ok admitted only values of the column's type */
static int col_promo(col_t *c, promo_t *p) {
    if (p->kind == 1) return col_slice(c, p->s);
    if (p->kind == 2) return col_int(c, p->i, 1);
    return col_null(c);
}
static PyObject *promo_obj(promo_t *p) {
    if (p->kind == 1) return str_of(p->s);
    if (p->kind == 2) return PyLong_FromLongLong(p->i);
    Py_RETURN_NONE;
}

/* decimal text of an INTEGER (ASCII digits after an optional sign), as fit.copy_int reads it */
static int decimal_int32(slice_t s, int64_t *out) {
    size_t i = 0;
    int neg = 0;
    if (s.n && (s.p[0] == '+' || s.p[0] == '-')) { neg = s.p[0] == '-'; i = 1; }
    if (i == s.n) return 0;
    int64_t v = 0;
    for (; i < s.n; i++) {
        if (s.p[i] < '0' || s.p[i] > '9') return 0;
        v = v * 10 + (s.p[i] - '0');
        if (v > (int64_t)INT32_MAX + 1) return 0;
    }
    v = neg ? -v : v;
    if (v < INT32_MIN || v > INT32_MAX) return 0;
    *out = v;
    return 1;
}

/* a copied value as the JSON's string holds it: a string's text, bytes' hex digits; 0 when
 * the JSON holds no string */
static int json_string_of(promo_t *p, buf_t *b) {
    if (p->kind == 1) return buf_put(b, p->s.p, p->s.n);
    if (p->kind != 5) return 0;
    return put_hex(b, p->s);
}

/* one copied column's value (fit.copy_text, copy_int, copy_authority) into its column */
static int col_copy(col_t *col, const copy_t *c, promo_t *promo) {
    promo_t *p = NULL;
    int rank = 0;
    for (; rank < c->n; rank++) {
        int kind = promo[c->keys[rank]].kind;
        if (kind && kind != 4) { p = &promo[c->keys[rank]]; break; }  /* not null */
    }
    if (!p) return col_null(col);
    if (p->kind == 1 && (c->kind == COPY_TEXT || (c->kind == COPY_AUTHORITY && rank == 0)))
        return col_slice(col, p->s);  /* the usual case */
    if (c->kind == COPY_INT && p->kind == 2)
        return col_int(col, p->i, p->i >= INT32_MIN && p->i <= INT32_MAX);
    if (c->kind == COPY_AUTHORITY && rank == 2) return col_null(col);  /* a port alone */
    buf_t b = {0};
    int ok = json_string_of(p, &b);
    if (ok && c->kind == COPY_AUTHORITY && rank == 1) {
        /* server.address ':' server.port, both there, or NULL */
        promo_t *port = &promo[c->keys[2]];
        ok = buf_ch(&b, ':');
        if (port->kind == 2) ok = ok && json_int(&b, port->i);
        else ok = ok && json_string_of(port, &b);
    }
    int done;
    if (b.oom) {
        done = 0;
    } else if (!ok) {
        done = col_null(col);
    } else if (c->kind == COPY_INT) {
        int64_t v;
        slice_t text = {(const uint8_t *)b.p, b.n};
        done = decimal_int32(text, &v) ? col_int(col, v, 1) : col_null(col);
    } else {
        done = col_str(col, b.p ? b.p : "", (Py_ssize_t)b.n);
    }
    free(b.p);
    return done;
}

/* the spans table's column types, in its order (schema._SPAN_COLUMNS) */
static const int g_span_types[20] = {T_STR, T_STR, T_STR, T_STR, T_STR, T_STR, T_STR, T_I64,
                                     T_I64, T_STR, T_STR, T_STR, T_I32, T_I64, T_STR, T_STR,
                                     T_I32, T_STR, T_STR, T_STR};

/* the columns events and links repeat from their span, as Python objects (only for spans
 * that have events or links) */
enum { J_RUN, J_TRACE, J_SPAN, J_NAME, J_ROLLOUT, J_ATTEMPT, J_PROMPT, J_CHECKPOINT, J_SHARD,
       N_JOIN };
static int join_objs(span_t *sp, res_t *r, PyObject *o[N_JOIN]) {
    promo_t *rollout = sp->promo[K_ROLLOUT].kind ? &sp->promo[K_ROLLOUT]
                                                 : &sp->promo[K_EP_ROLLOUT];
    promo_t *attempt = sp->promo[K_ATTEMPT].kind ? &sp->promo[K_ATTEMPT]
                                                 : &sp->promo[K_EP_ATTEMPT];
    /* each made only while none has failed: no call into Python with an error set (the
     * caller's fail path releases those made) */
    if (!(o[J_RUN] = sp->promo[K_RUN].kind == 1 ? str_of(sp->promo[K_RUN].s)
                     : r->has_run ? str_of(r->run_id) : NEWREF(Py_None))) return 0;
    if (!(o[J_TRACE] = hex_of(sp->trace_id))) return 0;
    if (!(o[J_SPAN] = hex_of(sp->span_id))) return 0;
    if (!(o[J_NAME] = str_of(sp->name))) return 0;
    if (!(o[J_ROLLOUT] = promo_obj(rollout))) return 0;
    if (!(o[J_ATTEMPT] = promo_obj(attempt))) return 0;
    if (!(o[J_PROMPT] = promo_obj(&sp->promo[K_PROMPT]))) return 0;
    if (!(o[J_CHECKPOINT] = promo_obj(&sp->promo[K_CHECKPOINT]))) return 0;
    if (!(o[J_SHARD] = promo_obj(&sp->promo[K_SHARD]))) return 0;
    return 1;
}

/* The spans come out as Arrow buffers, column by column (see _arrow_columns.h); events and
 * links, fewer, as rows of Python objects. None: a column past Arrow's 32-bit offsets (only a
 * body far over the default limits could), which the reference decoder then takes. */
static PyObject *build(walk_t *w) {
    texts_t texts = {w->json.p, w->has_double};
    span_t *spans = w->spans.p;
    res_t *resources = w->res.p;
    event_t *events = w->events.p;
    link_t *links = w->links.p;
    Py_ssize_t n = (Py_ssize_t)w->spans.n;
    col_t col[SPAN_COLUMNS];
    PyObject *span_cols = PyList_New(SPAN_COLUMNS);
    PyObject *event_rows = PyList_New((Py_ssize_t)w->events.n);
    PyObject *link_rows = PyList_New((Py_ssize_t)w->links.n);
    PyObject *join[N_JOIN] = {0};
    int declined = 0;  /* the body goes to the reference decoder: None, no error */
    /* each resource's JSON once, its doubles formatted */
    buf_t res_json = {0};
    size_t *res_off = calloc(w->res.n + 1, sizeof *res_off);
    for (int c = 0; c < SPAN_COLUMNS; c++)
        col_init(&col[c], c < 20 ? g_span_types[c]
                          : g_copies[c - 20].kind == COPY_INT ? T_I32 : T_STR);
    if (!span_cols || !event_rows || !link_rows || !res_off) goto fail;
    for (size_t i = 0; i < w->res.n; i++) {
        res_off[i] = res_json.n;
        if (resources[i].json.len != NO_TEXT && !put_text(&res_json, &texts, resources[i].json))
            goto nomem;
    }
    res_off[w->res.n] = res_json.n;
    size_t ev_i = 0, lk_i = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        span_t *sp = &spans[i];
        res_t *r = &resources[sp->res];
        promo_t *rollout = sp->promo[K_ROLLOUT].kind ? &sp->promo[K_ROLLOUT]
                                                     : &sp->promo[K_EP_ROLLOUT];
        promo_t *attempt = sp->promo[K_ATTEMPT].kind ? &sp->promo[K_ATTEMPT]
                                                     : &sp->promo[K_EP_ATTEMPT];
        int kind = sp->kind < 6 ? sp->kind : 0, code = sp->code < 3 ? sp->code : 0;
        int ok = (sp->promo[K_RUN].kind == 1 ? col_slice(&col[0], sp->promo[K_RUN].s)
                  : r->has_run ? col_slice(&col[0], r->run_id) : col_null(&col[0]))
            && col_hex(&col[1], sp->trace_id)
            && col_hex(&col[2], sp->span_id)
            && (sp->parent.n ? col_hex(&col[3], sp->parent) : col_null(&col[3]))
            && col_slice(&col[4], sp->name)
            && col_str(&col[5], g_kind_text[kind], (Py_ssize_t)strlen(g_kind_text[kind]))
            && (r->has_service ? col_slice(&col[6], r->service) : col_null(&col[6]))
            && col_int(&col[7], (int64_t)sp->start, 1)
            && col_int(&col[8], (int64_t)sp->end, 1)
            && col_str(&col[9], g_code_text[code], (Py_ssize_t)strlen(g_code_text[code]))
            && (sp->status_msg.n ? col_slice(&col[10], sp->status_msg) : col_null(&col[10]))
            && col_promo(&col[11], rollout)
            && col_promo(&col[12], attempt)
            && col_promo(&col[13], &sp->promo[K_PROMPT])
            && col_promo(&col[14], &sp->promo[K_CHECKPOINT])
            && col_promo(&col[15], &sp->promo[K_KIND])
            && col_promo(&col[16], &sp->promo[K_SHARD])
            && col_text(&col[17], &texts, sp->attrs)
            && (r->json.len == NO_TEXT ? col_null(&col[18])
                : col_str(&col[18], res_json.p + res_off[sp->res],
                          (Py_ssize_t)(res_off[sp->res + 1] - res_off[sp->res])))
            && (sp->has_scope ? col_slice(&col[19], sp->scope) : col_null(&col[19]));
        for (int k = 0; ok && k < N_COPIES; k++) ok = col_copy(&col[20 + k], &g_copies[k], sp->promo);
        if (!ok) goto nomem;
        if (!sp->ev_n && !sp->lk_n) continue;
        if (!join_objs(sp, r, join)) goto fail;
        for (size_t j = 0; j < sp->ev_n; j++, ev_i++) {
            event_t *ev = &events[sp->ev_first + j];
            PyObject *er = PyTuple_New(12);
            if (!er) goto fail;
            PyList_SET_ITEM(event_rows, (Py_ssize_t)ev_i, er);
            int from[] = {J_RUN, J_TRACE, J_SPAN, J_NAME};
            for (int k = 0; k < 4; k++) SET(er, k, NEWREF(join[from[k]]));
            SET(er, 4, str_of(ev->name));
            SET(er, 5, PyLong_FromUnsignedLongLong(ev->time));
            int inherit[] = {J_ROLLOUT, J_ATTEMPT, J_PROMPT, J_CHECKPOINT, J_SHARD};
            for (int k = 0; k < 5; k++) SET(er, 6 + k, NEWREF(join[inherit[k]]));
            SET(er, 11, text_of(&texts, ev->attrs));
        }
        for (size_t j = 0; j < sp->lk_n; j++, lk_i++) {
            link_t *lk = &links[sp->lk_first + j];
            PyObject *lr = PyTuple_New(6);
            if (!lr) goto fail;
            PyList_SET_ITEM(link_rows, (Py_ssize_t)lk_i, lr);
            for (int k = 0; k < 3; k++) SET(lr, k, NEWREF(join[k]));
            SET(lr, 3, hex_of(lk->trace_id));
            SET(lr, 4, hex_of(lk->span_id));
            SET(lr, 5, text_of(&texts, lk->attrs));
        }
        for (int k = 0; k < N_JOIN; k++) Py_CLEAR(join[k]);
    }
    if (res_json.oom) goto nomem;
    for (int c = 0; c < SPAN_COLUMNS; c++)
        if (col[c].data.n >= INT32_MAX) { declined = 1; goto fail; }  /* past 32-bit offsets */
    for (int c = 0; c < SPAN_COLUMNS; c++) {
        PyObject *o = col_obj(&col[c]);
        if (!o) goto fail;
        PyList_SET_ITEM(span_cols, c, o);
    }
    for (int c = 0; c < SPAN_COLUMNS; c++) col_free(&col[c]);
    free(res_json.p); free(res_off);
    return Py_BuildValue("(NNNn)", span_cols, event_rows, link_rows, n);
nomem:
    if (!PyErr_Occurred()) PyErr_NoMemory();
fail:
    for (int k = 0; k < N_JOIN; k++) Py_XDECREF(join[k]);
    for (int c = 0; c < SPAN_COLUMNS; c++) col_free(&col[c]);
    free(res_json.p); free(res_off);
    Py_XDECREF(span_cols); Py_XDECREF(event_rows); Py_XDECREF(link_rows);
    return declined ? NEWREF(Py_None) : NULL;
}

static void walk_free(walk_t *w) {
    free(w->json.p); free(w->res.p); free(w->spans.p); free(w->events.p); free(w->links.p);
}

/* decode_traces(body, max_items, max_attributes, max_value_bytes, max_events, max_links)
 * -> (span_columns, event_rows, link_rows, accepted) or None (decode with the reference);
 * span_columns: (validity, offsets, data, null count) per column of the spans table */
static PyObject *decode_traces(PyObject *self, PyObject *args) {
    Py_buffer body;
    unsigned long long li, la, lb, le, ll;
    if (!PyArg_ParseTuple(args, "y*KKKKK", &body, &li, &la, &lb, &le, &ll)) return NULL;
    if (!g_keys_set) {
        PyBuffer_Release(&body);
        PyErr_SetString(PyExc_RuntimeError, "set_keys() was not called");
        return NULL;
    }
    walk_t w;
    memset(&w, 0, sizeof w);
    w.lim = (limits_t){li, la, lb, le, ll};
    w.res.size = sizeof(res_t); w.spans.size = sizeof(span_t);
    w.events.size = sizeof(event_t); w.links.size = sizeof(link_t);
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = walk_request(&w, body.buf, (size_t)body.len);
    Py_END_ALLOW_THREADS
    PyObject *result;
    if (!ok) {
        result = NEWREF(Py_None);
    } else {
        result = build(&w);
        if (!result && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear(); /* cannot happen for validated text; still, the reference decides */
            result = NEWREF(Py_None);
        }
    }
    walk_free(&w);
    PyBuffer_Release(&body);
    return result;
}

/* set_keys((rollout, episode_rollout, attempt, episode_attempt, prompt, checkpoint,
 *           participant_kind, shard, run, open_marker_for, service_name, <the copied keys>)),
 * in the order of the enum above */
static PyObject *set_keys(PyObject *self, PyObject *args) {
    PyObject *keys;
    if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &keys)) return NULL;
    if (PyTuple_GET_SIZE(keys) != N_KEYS) {
        PyErr_Format(PyExc_ValueError, "expected %d keys", N_KEYS);
        return NULL;
    }
    for (int i = 0; i < N_KEYS; i++) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(keys, i), &n);
        if (!s) return NULL;
        if (n > MAX_KEY_LEN) {
            PyErr_Format(PyExc_ValueError, "a key of more than %d bytes", MAX_KEY_LEN);
            return NULL;
        }
        char *copy = malloc((size_t)n + 1);
        if (!copy) return PyErr_NoMemory();
        memcpy(copy, s, (size_t)n + 1);
        free(g_keys[i]);
        g_keys[i] = copy; g_key_len[i] = (size_t)n;
    }
    memset(g_first_of_len, -1, sizeof g_first_of_len);
    for (int i = N_KEYS - 1; i >= 0; i--) {  /* each length's list in the keys' order */
        g_next_of_len[i] = g_first_of_len[g_key_len[i]];
        g_first_of_len[g_key_len[i]] = (signed char)i;
    }
    g_keys_set = 1;
    Py_RETURN_NONE;
}

/* format_double(x) -> the JSON text orjson writes for x (for tests) */
static PyObject *format_double(PyObject *self, PyObject *arg) {
    double d = PyFloat_AsDouble(arg);
    if (d == -1.0 && PyErr_Occurred()) return NULL;
    buf_t b = {0};
    if (!json_double(&b, d) || b.oom) {
        free(b.p);
        Py_RETURN_NONE;
    }
    PyObject *o = PyUnicode_FromStringAndSize(b.p, (Py_ssize_t)b.n);
    free(b.p);
    return o;
}

static PyMethodDef methods[] = {
    {"decode_traces", decode_traces, METH_VARARGS,
     "decode_traces(body, max_items, max_attributes, max_value_bytes, max_events, max_links)"
     " -> (span_columns, event_rows, link_rows, accepted), or None when the reference decoder "
     "must decode the body"},
    {"set_keys", set_keys, METH_VARARGS, "the promoted attribute keys, in the module's order"},
    {"format_double", format_double, METH_O, "a double as the attributes JSON writes it"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastdecode", "Compiled OTLP trace decode (see decode.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastdecode(void) {
    return PyModule_Create(&module);
}
