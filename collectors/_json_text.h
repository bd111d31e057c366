/* Growable byte buffers and JSON text as orjson writes it, shared by the compiled OTLP decoder
 * (otlp/_fastdecode.c) and the exporter's span encoder (_fastencode.c). Both are tested against
 * orjson's own text (tests/collectors/test_fast_decode.py, test_fast_encode.py). */
#ifndef ROLLOUTSCOPE_JSON_TEXT_H
#define ROLLOUTSCOPE_JSON_TEXT_H
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable byte buffers (plain malloc: usable without the GIL) -------------------------------------------------------------- */
typedef struct { char *p; size_t n, cap; int oom; } buf_t;

static int buf_reserve(buf_t *b, size_t extra) {
    if (b->n + extra <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + extra) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) { b->oom = 1; return 0; }
    b->p = p; b->cap = cap;
    return 1;
}
static inline int buf_put(buf_t *b, const void *s, size_t n) {
    if (!buf_reserve(b, n)) return 0;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    return 1;
}

static inline int buf_ch(buf_t *b, char c) {
    if (!buf_reserve(b, 1)) return 0;
    b->p[b->n++] = c;
    return 1;
}

/* ---- JSON as orjson writes it ----------------------------------------------------------- */
/* whether none of a word's 8 bytes is a control character, '"' or '\\' (the bytes JSON
 * escapes): a byte-wise test eight bytes at a time, exact where it says so */
static inline int word_plain(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    uint64_t quote = w ^ (ones * '"'), slash = w ^ (ones * '\\');
    uint64_t control = (w - ones * 0x20) & ~w & high;  /* a byte below 0x20 (not >= 0x80) */
    uint64_t quotes = (quote - ones) & ~quote & high, slashes = (slash - ones) & ~slash & high;
    return !(control | quotes | slashes);
}
static int json_str(buf_t *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    if (!buf_reserve(b, n + 2)) return 0;
    size_t i = 0;
    while (i + 8 <= n) {  /* the usual text needs no escape: found eight bytes at a time */
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (!word_plain(w)) break;
        i += 8;
    }
    while (i < n && (unsigned char)s[i] >= 0x20 && s[i] != '"' && s[i] != '\\') i++;
    if (i == n) {
        b->p[b->n++] = '"';
        memcpy(b->p + b->n, s, n);
        b->n += n;
        b->p[b->n++] = '"';
        return 1;
    }
    b->p[b->n++] = '"';
    size_t run = 0;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        if (!buf_put(b, s + run, i - run)) return 0;
        run = i + 1;
        char esc[6];
        switch (c) {
        case '"': buf_put(b, "\\\"", 2); break;
        case '\\': buf_put(b, "\\\\", 2); break;
        case '\b': buf_put(b, "\\b", 2); break;
        case '\t': buf_put(b, "\\t", 2); break;
        case '\n': buf_put(b, "\\n", 2); break;
        case '\f': buf_put(b, "\\f", 2); break;
        case '\r': buf_put(b, "\\r", 2); break;
        default:
            esc[0] = '\\'; esc[1] = 'u'; esc[2] = '0'; esc[3] = '0';
            esc[4] = hex[c >> 4]; esc[5] = hex[c & 15];
            buf_put(b, esc, 6);
        }
    }
    if (!buf_put(b, s + run, n - run)) return 0;
    return buf_put(b, "\"", 1);
}
/* an int's decimal text into d (at least 21 bytes); returns its length (as "%lld",
 * without snprintf's cost) */
static int decimal(char *d, long long x) {
    char tmp[24];
    int n = 0;
    unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
    do { tmp[n++] = (char)('0' + u % 10); u /= 10; } while (u);
    int len = 0;
    if (x < 0) d[len++] = '-';
    while (n) d[len++] = tmp[--n];
    return len;
}
/* a double as orjson writes it: Python's shortest repr, except that an exponent loses its
 * leading zero ("1e-7", not "1e-07") and numbers down to 1e-5 are written out ("0.00001"),
 * and NaN / infinities are null. Returns 0 on anything it does not recognise (the caller
 * declines). Needs the GIL (PyOS_double_to_string). */
static int json_double(buf_t *b, double d) {
    if (d != d || d - d != 0) return buf_put(b, "null", 4);
    char *r = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (!r) { PyErr_Clear(); return 0; }
    int ok = 1;
    char *e = strchr(r, 'e');
    if (!e || e[1] == '+') {
        ok = buf_put(b, r, strlen(r));
    } else if (e[1] == '-' && e[2] == '0' && e[3] == '5' && e[4] == 0) {
        const char *m = r;
        if (*m == '-') { ok &= buf_put(b, "-", 1); m++; }
        ok &= buf_put(b, "0.0000", 6);
        for (; m < e; m++) if (*m != '.') ok &= buf_put(b, m, 1);
    } else if (e[1] == '-') {
        const char *x = e + 2;
        while (*x == '0' && x[1]) x++;
        ok &= buf_put(b, r, (size_t)(e - r + 2));
        ok &= buf_put(b, x, strlen(x));
    } else {
        ok = 0;
    }
    PyMem_Free(r);
    return ok;
}
#endif
