/* The three SHA-256 per sealed event, for a whole batch in one call (refold.storage._sealhash).
 *
 * The definition of the hash chain is fold/chain.py; storage/sealing.py prepares, with Arrow,
 * the bytes every event's hashes cover and calls this module instead of running hashlib once per
 * hash: at ~1k events per append, the three hashlib calls per event (~0.4 us each: Python's call
 * overhead plus EVP's per-call provider dispatch) were most of the sealing time. The hashing is
 * OpenSSL's (the library hashlib wraps; SHA-NI where the CPU has it), so this file is the loop:
 *
 *   commit(n, salts, content_offsets, content_data, content_start,
 *          header_offsets, header_data, header_start, domain) -> bytes
 *       32 * n bytes: for row i, H(domain || header_i || H(salt_i || content_i)), where salt_i is
 *       salts[16 i : 16 i + 16] and content_i / header_i are values of Arrow binary (or string)
 *       arrays given as their int32 offsets buffer, data buffer and the array's offset.
 *
 *   chain(prev, commitments) -> bytes
 *       32 * (n + 1) bytes: prev, then link_i = H(link_{i-1} || commitment_i) for each 32-byte
 *       commitment (link_{-1} = prev).
 *
 * Both release the GIL while hashing, and check every offset against the buffers they were
 * given, so a malformed array raises ValueError instead of reading out of bounds.
 *
 * OpenSSL 3 deprecates SHA256_Init/Update/Final for EVP, but EVP's dispatch costs ~150 ns per
 * hash (measured here: 64-byte input 180 ns low-level vs 320-390 ns EVP), about as much as the
 * hash itself; so the low-level calls are used while OpenSSL still ships them, EVP after.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
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

static PyObject *commit(PyObject *self, PyObject *args) {
    Py_ssize_t n, cstart, hstart;
    Py_buffer salts, coff, cdata, hoff, hdata, domain;
    if (!PyArg_ParseTuple(args, "ny*y*y*ny*y*ny*", &n, &salts, &coff, &cdata, &cstart, &hoff,
                          &hdata, &hstart, &domain))
        return NULL;
    PyObject *result = NULL;
    hash_ctx *ctx = NULL;
    if (n < 0 || salts.len != (Py_ssize_t)SALT * n) {
        PyErr_Format(PyExc_ValueError, "salts: expected %zd bytes for %zd rows, got %zd", SALT * n, n, salts.len);
        goto done;
    }
    if (check_offsets("content", &coff, &cdata, cstart, n) || check_offsets("header", &hoff, &hdata, hstart, n))
        goto done;
    result = PyBytes_FromStringAndSize(NULL, DIGEST * n);
    if (result == NULL || (ctx = ctx_new()) == NULL)
        goto fail;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    const int32_t *co = (const int32_t *)coff.buf + cstart, *ho = (const int32_t *)hoff.buf + hstart;
    const char *cd = cdata.buf, *hd = hdata.buf, *salt = salts.buf;
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    unsigned char inner[DIGEST];
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        ok = digest_parts(ctx, inner, salt + SALT * i, SALT, cd + co[i], co[i + 1] - co[i], NULL, 0)
            && digest_parts(ctx, out + DIGEST * i, domain.buf, domain.len, hd + ho[i], ho[i + 1] - ho[i],
                            inner, DIGEST);
    }
    Py_END_ALLOW_THREADS
    if (ok)
        goto done;
fail:
    Py_CLEAR(result);
    if (!PyErr_Occurred())
        openssl_failed();
done:
    ctx_free(ctx);
    PyBuffer_Release(&salts); PyBuffer_Release(&coff); PyBuffer_Release(&cdata);
    PyBuffer_Release(&hoff); PyBuffer_Release(&hdata); PyBuffer_Release(&domain);
    return result;
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

static PyMethodDef methods[] = {
    {"commit", commit, METH_VARARGS,
     "commit(n, salts, content_offsets, content_data, content_start, header_offsets, header_data, "
     "header_start, domain) -> 32*n bytes of commitments"},
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
    return PyModule_Create(&module);
}
