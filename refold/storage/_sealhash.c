/* The three SHA-256 per sealed event, for a whole batch in one call (refold.storage._sealhash).
 *
 * The definition of the hash chain is fold/chain.py; storage/sealing.py prepares, with Arrow,
 * the bytes every event's hashes cover and calls this module instead of running hashlib once per
 * hash: at ~1k events per append, the three hashlib calls per event (~0.4 us each: Python's call
 * overhead plus EVP's per-call provider dispatch) were most of the sealing time. The hashing is
 * OpenSSL's (the library hashlib wraps; SHA-NI where the CPU has it), so this file is the loop:
 *
 *   commit(n, salts, content_offsets, content_data, content_start, header_parts, domain) -> bytes
 *       32 * n bytes: for row i, H(domain || header_i || H(salt_i || content_i)), where salt_i is
 *       salts[16 i : 16 i + 16], content_i a value of an Arrow binary (or string) array given as
 *       its int32 offsets buffer, data buffer and the array's offset, and header_i the
 *       concatenation of header_parts: each either bytes (the same in every row), an
 *       (offsets, data, start) tuple of such an array (row i's value), or a (values, start) tuple
 *       of an int64 array's values buffer (row i's value in decimal, as json.dumps writes it: the
 *       seq, without a cast to strings first), or a (list_offsets, item_offsets, item_data, start,
 *       item_start) tuple of a list-of-strings array (row i's list as a JSON array of its items,
 *       each between quotes as it is: for items that need no escaping, which the caller checks).
 *       The header is assembled
 *       here, row by row, instead of by an Arrow join that materializes every row's header.
 *
 *   commit(n, salts, content_offsets, content_data, content_start, header_parts, domain, prev)
 *       with prev (32 bytes): (commitments, chain(prev, commitments)) from one call, the links
 *       hashed in the same pass without the GIL.
 *
 *   start(same arguments as commit) -> job
 *       commit() on a native thread of its own, which never takes the GIL; job.result() waits
 *       for it and returns what commit() returns.
 *
 *   chain(prev, commitments) -> bytes
 *       32 * (n + 1) bytes: prev, then link_i = H(link_{i-1} || commitment_i) for each 32-byte
 *       commitment (link_{-1} = prev).
 *
 *   hexlify(data) -> bytes
 *       data as lowercase hex (what bytes.hex() writes, as ASCII bytes): the salt, commitment
 *       and link columns are stored as hex, and a table lookup is ~5x faster than bytes.hex()
 *       plus the copy into an Arrow buffer (~0.15 ms of a 1k-event append).
 *
 *   needs_escaping(data) -> bool
 *       whether data holds a byte that JSON string encoding escapes (a control character, '"' or
 *       '\\'): the header writes a string column's values between quotes as they are unless one
 *       does; scanned in place in the Arrow buffer instead of copied into Python bytes first.
 *
 * commit and chain release the GIL while hashing (start's thread never holds it), and check every
 * offset against the buffers they were given, so a malformed array raises ValueError instead of
 * reading out of bounds.
 *
 * OpenSSL 3 deprecates SHA256_Init/Update/Final for EVP, but EVP's dispatch costs ~150 ns per
 * hash (measured here: 64-byte input 180 ns low-level vs 320-390 ns EVP), about as much as the
 * hash itself; so the low-level calls are used while OpenSSL still ships them, EVP after.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#define OPENSSL_SUPPRESS_DEPRECATED /* the low-level SHA256 calls, on purpose: see above */
#include <openssl/opensslv.h>

#define DIGEST 32
#define SALT 16

#if OPENSSL_VERSION_MAJOR < 4
#include <openssl/sha.h>
typedef SHA256_CTX hash_ctx;
static hash_ctx *ctx_new(void) { return PyMem_RawMalloc(sizeof(hash_ctx)); }
static void ctx_free(hash_ctx *ctx) { PyMem_RawFree(ctx); }
#define INIT(ctx) SHA256_Init(ctx)
#define UPDATE(ctx, data, len) SHA256_Update(ctx, data, len)
#define FINAL(ctx, out) SHA256_Final(out, ctx)
static int ready(void) { return 1; }
#else
#include <openssl/evp.h>
typedef EVP_MD_CTX hash_ctx;
static EVP_MD *sha256_md = NULL;
static hash_ctx *ctx_new(void) { return EVP_MD_CTX_new(); }
static void ctx_free(hash_ctx *ctx) { EVP_MD_CTX_free(ctx); }
#define INIT(ctx) EVP_DigestInit_ex(ctx, sha256_md, NULL)
#define UPDATE(ctx, data, len) EVP_DigestUpdate(ctx, data, len)
#define FINAL(ctx, out) EVP_DigestFinal_ex(ctx, out, NULL)
/* fetched once: an implicit fetch per EVP_DigestInit_ex costs more than a short hash */
static int ready(void) { return sha256_md != NULL || (sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL)) != NULL; }
#endif

/* Check an Arrow int32 offsets buffer covering rows start .. start + n against its data buffer. */
static int check_offsets(const char *what, const Py_buffer *offsets, const Py_buffer *data,
                         Py_ssize_t start, Py_ssize_t n) {
    if (start < 0 || offsets->len < (Py_ssize_t)sizeof(int32_t) * (start + n + 1)) {
        PyErr_Format(PyExc_ValueError, "%s: offsets buffer too short for %zd rows from %zd", what, n, start);
        return -1;
    }
    const int32_t *off = (const int32_t *)offsets->buf + start;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (off[i] < 0 || off[i + 1] < off[i] || off[i + 1] > data->len) {
            PyErr_Format(PyExc_ValueError, "%s: offset of row %zd out of range", what, i);
            return -1;
        }
    }
    return 0;
}

/* out = H(a || b || c); 1 on success */
static int digest_parts(hash_ctx *ctx, unsigned char *out, const void *a, size_t alen,
                        const void *b, size_t blen, const void *c, size_t clen) {
    return INIT(ctx) && UPDATE(ctx, a, alen) && UPDATE(ctx, b, blen) && (clen == 0 || UPDATE(ctx, c, clen))
        && FINAL(ctx, out);
}

static PyObject *openssl_failed(void) {
    PyErr_SetString(PyExc_RuntimeError, "OpenSSL SHA-256 failed (libcrypto unusable?)");
    return NULL;
}

/* One piece of every row's header: the same bytes for each row, one value of a string column, or
 * one value of an int64 column written in decimal (as json.dumps writes an int). */
enum { CONSTANT, STRINGS, INTEGERS, LISTS };
typedef struct {
    int column;
    Py_buffer offsets, data; /* a string column's buffers (a list column's items'); a constant's bytes, or an
                                int64 column's values, in data */
    Py_buffer lists;         /* a list column's offsets into its items */
    Py_ssize_t start, item_start;
} piece;

#define INT64_DIGITS 20 /* "-9223372036854775808" */

/* value in decimal at out; the number of bytes written */
static Py_ssize_t write_int64(char *out, int64_t value) {
    char digits[INT64_DIGITS];
    uint64_t rest = value < 0 ? (uint64_t)0 - (uint64_t)value : (uint64_t)value;
    int k = 0;
    do {
        digits[k++] = (char)('0' + rest % 10);
        rest /= 10;
    } while (rest);
    Py_ssize_t len = 0;
    if (value < 0)
        out[len++] = '-';
    while (k)
        out[len++] = digits[--k];
    return len;
}

static void release_pieces(piece *pieces, Py_ssize_t count) {
    for (Py_ssize_t k = 0; k < count; k++) { /* buffers not taken are zeroed: releasing them does nothing */
        PyBuffer_Release(&pieces[k].offsets);
        PyBuffer_Release(&pieces[k].data);
        PyBuffer_Release(&pieces[k].lists);
    }
    PyMem_Free(pieces);
}

/* Check a list column's offsets for rows start .. start + n, and its items' offsets and data. */
static int check_lists(const piece *p, Py_ssize_t n) {
    if (p->start < 0 || p->item_start < 0 || p->lists.len < (Py_ssize_t)sizeof(int32_t) * (p->start + n + 1)) {
        PyErr_Format(PyExc_ValueError, "header list column: offsets buffer too short for %zd rows from %zd", n, p->start);
        return -1;
    }
    const int32_t *lo = (const int32_t *)p->lists.buf + p->start;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (lo[i] < 0 || lo[i + 1] < lo[i]) {
            PyErr_Format(PyExc_ValueError, "header list column: offset of row %zd out of range", i);
            return -1;
        }
    }
    return check_offsets("header list items", &p->offsets, &p->data, p->item_start + lo[0], lo[n] - lo[0]);
}

/* Row i of a list column as a JSON array of its items, each between quotes as it is (the
 * caller checked that no item needs escaping); the bytes written. */
static Py_ssize_t write_list(char *out, const piece *p, Py_ssize_t i) {
    const int32_t *lo = (const int32_t *)p->lists.buf + p->start;
    const int32_t *off = (const int32_t *)p->offsets.buf + p->item_start;
    const char *data = p->data.buf;
    char *at = out;
    *at++ = '[';
    for (int32_t j = lo[i]; j < lo[i + 1]; j++) {
        if (j > lo[i])
            *at++ = ',';
        *at++ = '"';
        memcpy(at, data + off[j], off[j + 1] - off[j]);
        at += off[j + 1] - off[j];
        *at++ = '"';
    }
    *at++ = ']';
    return at - out;
}

/* Parse the header parts (bytes, (offsets, data, start) tuples of string columns, (values, start)
 * tuples of int64 columns, or (list_offsets, item_offsets, item_data, start, item_start) tuples of
 * list-of-string columns); NULL with an exception set. */
static piece *parse_pieces(PyObject *parts, Py_ssize_t n, Py_ssize_t *count) {
    PyObject *seq = PySequence_Fast(parts, "header parts must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    piece *pieces = PyMem_Calloc(m ? m : 1, sizeof(piece));
    *count = 0;
    if (pieces == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t k = 0; k < m; k++, (*count)++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, k);
        piece *p = &pieces[k];
        if (PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 2) {
            p->column = INTEGERS;
            if (!PyArg_ParseTuple(item, "y*n", &p->data, &p->start))
                goto fail;
            if (p->start < 0 || p->data.len < (Py_ssize_t)sizeof(int64_t) * (p->start + n)) {
                PyErr_Format(PyExc_ValueError, "header int64 column: values buffer too short for %zd rows from %zd",
                             n, p->start);
                (*count)++; /* its buffer is held: release it too */
                goto fail;
            }
        } else if (PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 5) {
            p->column = LISTS;
            if (!PyArg_ParseTuple(item, "y*y*y*nn", &p->lists, &p->offsets, &p->data, &p->start, &p->item_start))
                goto fail;
            if (check_lists(p, n)) {
                (*count)++; /* its buffers are held: release them too */
                goto fail;
            }
        } else if (PyTuple_Check(item)) {
            p->column = STRINGS;
            if (!PyArg_ParseTuple(item, "y*y*n", &p->offsets, &p->data, &p->start))
                goto fail;
            if (check_offsets("header column", &p->offsets, &p->data, p->start, n)) {
                (*count)++; /* both buffers are held: release them too */
                goto fail;
            }
        } else if (PyObject_GetBuffer(item, &p->data, PyBUF_SIMPLE) < 0) {
            goto fail;
        }
    }
    Py_DECREF(seq);
    return pieces;
fail:
    Py_DECREF(seq);
    release_pieces(pieces, *count);
    return NULL;
}

/* One commit() call's work: parsed and checked with the GIL (work_prepare), hashed without it and
 * without touching any Python object (work_run: the outputs are bytes objects allocated before,
 * written in place), then handed back with the GIL (work_result, work_release). */
typedef struct {
    Py_ssize_t n, cstart, count;
    Py_buffer salts, coff, cdata, domain, prev; /* prev.buf NULL: commitments only */
    piece *pieces;
    char *scratch;
    hash_ctx *ctx;
    PyObject *commitments, *links;
    int ok;
} work;

static void work_release(work *w) {
    ctx_free(w->ctx);
    PyMem_RawFree(w->scratch);
    if (w->pieces != NULL)
        release_pieces(w->pieces, w->count);
    PyBuffer_Release(&w->salts); PyBuffer_Release(&w->coff); PyBuffer_Release(&w->cdata);
    PyBuffer_Release(&w->domain); PyBuffer_Release(&w->prev);
    Py_CLEAR(w->commitments);
    Py_CLEAR(w->links);
    memset(w, 0, sizeof *w);
}

/* 0, or -1 with an exception set and nothing held. */
static int work_prepare(work *w, PyObject *args) {
    memset(w, 0, sizeof *w);
    PyObject *parts;
    if (!PyArg_ParseTuple(args, "ny*y*y*nOy*|y*", &w->n, &w->salts, &w->coff, &w->cdata, &w->cstart, &parts,
                          &w->domain, &w->prev))
        return -1; /* PyArg_ParseTuple released what it had taken */
    Py_ssize_t n = w->n;
    if (n < 0 || w->salts.len != (Py_ssize_t)SALT * n) {
        PyErr_Format(PyExc_ValueError, "salts: expected %zd bytes for %zd rows, got %zd", SALT * n, n, w->salts.len);
        goto fail;
    }
    if (w->prev.buf != NULL && w->prev.len != DIGEST) {
        PyErr_SetString(PyExc_ValueError, "commit: prev must be 32 bytes");
        goto fail;
    }
    if (check_offsets("content", &w->coff, &w->cdata, w->cstart, n)
        || (w->pieces = parse_pieces(parts, n, &w->count)) == NULL)
        goto fail;
    /* the longest header, so one scratch buffer holds any row's */
    Py_ssize_t longest = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len = 0;
        for (Py_ssize_t k = 0; k < w->count; k++) {
            const piece *p = &w->pieces[k];
            if (p->column == STRINGS) {
                const int32_t *off = (const int32_t *)p->offsets.buf + p->start;
                len += off[i + 1] - off[i];
            } else if (p->column == LISTS) { /* [ ] and, per item, two quotes and a comma */
                const int32_t *lo = (const int32_t *)p->lists.buf + p->start;
                const int32_t *off = (const int32_t *)p->offsets.buf + p->item_start;
                len += 2 + off[lo[i + 1]] - off[lo[i]] + 3 * (Py_ssize_t)(lo[i + 1] - lo[i]);
            } else {
                len += p->column == INTEGERS ? INT64_DIGITS : p->data.len;
            }
        }
        if (len > longest)
            longest = len;
    }
    if ((w->commitments = PyBytes_FromStringAndSize(NULL, DIGEST * n)) == NULL
        || (w->prev.buf != NULL && (w->links = PyBytes_FromStringAndSize(NULL, DIGEST * (n + 1))) == NULL)
        || (w->ctx = ctx_new()) == NULL || (w->scratch = PyMem_RawMalloc(longest + 1)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto fail;
    }
    return 0;
fail:
    work_release(w);
    return -1;
}

/* The hashing; no Python API (runs without the GIL, on any thread). */
static void work_run(work *w) {
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(w->commitments);
    unsigned char *link = w->links == NULL ? NULL : (unsigned char *)PyBytes_AS_STRING(w->links);
    const int32_t *co = (const int32_t *)w->coff.buf + w->cstart;
    const char *cd = w->cdata.buf, *salt = w->salts.buf;
    unsigned char inner[DIGEST];
    int ok = 1;
    for (Py_ssize_t i = 0; ok && i < w->n; i++) {
        /* the header assembled in place, then hashed in one update: dozens of short updates cost more */
        char *at = w->scratch;
        for (Py_ssize_t k = 0; k < w->count; k++) {
            const piece *p = &w->pieces[k];
            if (p->column == STRINGS) {
                const int32_t *off = (const int32_t *)p->offsets.buf + p->start;
                memcpy(at, (const char *)p->data.buf + off[i], off[i + 1] - off[i]);
                at += off[i + 1] - off[i];
            } else if (p->column == INTEGERS) {
                int64_t value;
                memcpy(&value, (const char *)p->data.buf + sizeof(int64_t) * (p->start + i), sizeof value);
                at += write_int64(at, value);
            } else if (p->column == LISTS) {
                at += write_list(at, p, i);
            } else {
                memcpy(at, p->data.buf, p->data.len);
                at += p->data.len;
            }
        }
        ok = digest_parts(w->ctx, inner, salt + SALT * i, SALT, cd + co[i], co[i + 1] - co[i], NULL, 0)
            && digest_parts(w->ctx, out + DIGEST * i, w->domain.buf, w->domain.len, w->scratch, at - w->scratch,
                            inner, DIGEST);
    }
    /* the links in the same pass: a second call would need the GIL in between */
    if (link != NULL) {
        memcpy(link, w->prev.buf, DIGEST);
        for (Py_ssize_t i = 0; ok && i < w->n; i++)
            ok = digest_parts(w->ctx, link + DIGEST * (i + 1), link + DIGEST * i, DIGEST, out + DIGEST * i, DIGEST,
                              NULL, 0);
    }
    w->ok = ok;
}

/* The commitments, or (commitments, links); NULL with an exception set. Releases the work. */
static PyObject *work_result(work *w) {
    PyObject *result = NULL;
    if (!w->ok)
        openssl_failed();
    else if (w->links == NULL)
        result = Py_NewRef(w->commitments);
    else
        result = PyTuple_Pack(2, w->commitments, w->links);
    work_release(w);
    return result;
}

static PyObject *commit(PyObject *self, PyObject *args) {
    work w;
    if (work_prepare(&w, args) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    work_run(&w);
    Py_END_ALLOW_THREADS
    return work_result(&w);
}

/* A commit() running on a thread of its own, which never takes the GIL: it starts hashing at
 * once, however busy the calling thread keeps the interpreter (a Python worker thread would
 * first wait for the GIL to pick the job up, and again to return it). */
typedef struct {
    PyObject_HEAD
    work w;
    pthread_t thread;
    enum { IDLE, RUNNING, JOINING } state;
} HashJob;

static void *hash_job_thread(void *arg) {
    work_run(&((HashJob *)arg)->w);
    return NULL;
}

static PyObject *hash_job_result(PyObject *self, PyObject *unused) {
    HashJob *job = (HashJob *)self;
    if (job->state == JOINING) {
        PyErr_SetString(PyExc_RuntimeError, "another thread is taking this job's result");
        return NULL;
    }
    if (job->w.commitments == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this job's result was taken already");
        return NULL;
    }
    if (job->state == RUNNING) {
        job->state = JOINING;
        Py_BEGIN_ALLOW_THREADS
        pthread_join(job->thread, NULL);
        Py_END_ALLOW_THREADS
        job->state = IDLE;
    }
    return work_result(&job->w);
}

static void hash_job_dealloc(PyObject *self) {
    HashJob *job = (HashJob *)self;
    if (job->state == RUNNING) { /* dropped unread: the thread still reads the buffers */
        Py_BEGIN_ALLOW_THREADS
        pthread_join(job->thread, NULL);
        Py_END_ALLOW_THREADS
    }
    work_release(&job->w);
    PyObject_Free(self);
}

static PyMethodDef hash_job_methods[] = {
    {"result", hash_job_result, METH_NOARGS, "result() -> what commit() returns, once the thread is done"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject HashJobType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "refold.storage._sealhash.HashJob",
    .tp_basicsize = sizeof(HashJob),
    .tp_dealloc = hash_job_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A commit() running on a native thread; result() waits for it.",
    .tp_methods = hash_job_methods,
};

static PyObject *start(PyObject *self, PyObject *args) {
    HashJob *job = PyObject_New(HashJob, &HashJobType);
    if (job == NULL)
        return NULL;
    job->state = IDLE;
    if (work_prepare(&job->w, args) < 0) {
        Py_DECREF(job);
        return NULL;
    }
    if (pthread_create(&job->thread, NULL, hash_job_thread, job) == 0) {
        job->state = RUNNING;
    } else { /* no thread to be had: hash here, the result is the same */
        Py_BEGIN_ALLOW_THREADS
        work_run(&job->w);
        Py_END_ALLOW_THREADS
    }
    return (PyObject *)job;
}

static PyObject *chain(PyObject *self, PyObject *args) {
    Py_buffer prev, commitments;
    if (!PyArg_ParseTuple(args, "y*y*", &prev, &commitments))
        return NULL;
    PyObject *result = NULL;
    hash_ctx *ctx = NULL;
    if (prev.len != DIGEST || commitments.len % DIGEST) {
        PyErr_SetString(PyExc_ValueError, "chain: prev must be 32 bytes and commitments a multiple of 32");
        goto done;
    }
    Py_ssize_t n = commitments.len / DIGEST;
    result = PyBytes_FromStringAndSize(NULL, DIGEST * (n + 1));
    if (result == NULL || (ctx = ctx_new()) == NULL)
        goto fail;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    const unsigned char *c = commitments.buf;
    memcpy(out, prev.buf, DIGEST);
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; ok && i < n; i++)  /* sequential by design: each link covers the one before */
        ok = digest_parts(ctx, out + DIGEST * (i + 1), out + DIGEST * i, DIGEST, c + DIGEST * i, DIGEST, NULL, 0);
    Py_END_ALLOW_THREADS
    if (ok)
        goto done;
fail:
    Py_CLEAR(result);
    if (!PyErr_Occurred())
        openssl_failed();
done:
    ctx_free(ctx);
    PyBuffer_Release(&prev); PyBuffer_Release(&commitments);
    return result;
}

/* two ASCII hex digits per byte value, filled at import */
static uint16_t hex_pairs[256];

static void fill_hex_pairs(void) {
    static const char digits[] = "0123456789abcdef";
    for (int b = 0; b < 256; b++) {
        unsigned char pair[2] = {(unsigned char)digits[b >> 4], (unsigned char)digits[b & 15]};
        memcpy(&hex_pairs[b], pair, 2);  /* byte order of the pair as it lies in memory */
    }
}

static PyObject *hexlify(PyObject *self, PyObject *arg) {
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL;
    if (data.len > PY_SSIZE_T_MAX / 2) {
        PyErr_SetString(PyExc_OverflowError, "hexlify: input too large");
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, 2 * data.len);
    if (result == NULL)
        goto done;
    const unsigned char *in = data.buf;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < data.len; i++)
        memcpy(out + 2 * i, &hex_pairs[in[i]], 2);
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&data);
    return result;
}

static PyObject *needs_escaping(PyObject *self, PyObject *arg) {
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *in = data.buf;
    int found = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < data.len; i++) {
        unsigned char b = in[i];
        if (b < 0x20 || b == '"' || b == '\\') {
            found = 1;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    return PyBool_FromLong(found);
}

static PyMethodDef methods[] = {
    {"needs_escaping", needs_escaping, METH_O,
     "needs_escaping(data) -> True when data holds a byte a JSON string escapes"},
    {"hexlify", hexlify, METH_O, "hexlify(data) -> lowercase hex of data, as bytes"},
    {"commit", commit, METH_VARARGS,
     "commit(n, salts, content_offsets, content_data, content_start, header_parts, domain[, prev]) "
     "-> 32*n bytes of commitments; with prev, (commitments, chain(prev, commitments))"},
    {"start", start, METH_VARARGS,
     "start(same arguments as commit) -> a job hashing on a native thread; job.result() is commit()'s result"},
    {"chain", chain, METH_VARARGS, "chain(prev, commitments) -> 32*(n+1) bytes: prev, then each link"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_sealhash", .m_size = -1, .m_methods = methods,
    .m_doc = "Batch SHA-256 for sealing events into refold's hash chain (see storage/_sealhash.c).",
};

PyMODINIT_FUNC PyInit__sealhash(void) {
    if (!ready()) {
        PyErr_SetString(PyExc_ImportError, "OpenSSL has no SHA256 digest");
        return NULL;
    }
    fill_hex_pairs();
    if (PyType_Ready(&HashJobType) < 0)
        return NULL;
    return PyModule_Create(&module);
}
