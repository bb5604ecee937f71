// vaka_curl: libcurl through dlopen/dlsym. See include/vaka_curl.h.
#define CURL_DISABLE_DEPRECATION 1  // CURLOPT_PROTOCOLS is the fallback for libcurl < 7.85
#include "vaka_curl.h"

#include <curl/curl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct vaka_curl_lib {
    struct vaka_curl_lib *next;
    char *name;
    void *handle;
    CURLcode (*global_init)(long flags);
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *curl, CURLoption option, ...);
    CURLcode (*easy_perform)(CURL *curl);
    CURLcode (*easy_getinfo)(CURL *curl, CURLINFO info, ...);
    void (*easy_cleanup)(CURL *curl);
    void (*easy_reset)(CURL *curl);
    const char *(*easy_strerror)(CURLcode code);
    struct curl_slist *(*slist_append)(struct curl_slist *list, const char *line);
    void (*slist_free_all)(struct curl_slist *list);
    curl_version_info_data *(*version_info)(CURLversion stamp);
    char version[160];
};

struct vaka_curl_session {
    vaka_curl_lib *lib;
    CURL *easy;
    char error[CURL_ERROR_SIZE];
};

static pthread_mutex_t libs_lock = PTHREAD_MUTEX_INITIALIZER;
static vaka_curl_lib *libs;

static void set_error(char *error, size_t size, const char *a, const char *b) {
    if (error && size) snprintf(error, size, "%s%s", a, b ? b : "");
}

vaka_curl_lib *vaka_curl_open(const char *library, char *error, size_t error_size) {
    if (!library) library = "libcurl.so.4";
    set_error(error, error_size, "", NULL);
    pthread_mutex_lock(&libs_lock);
    for (vaka_curl_lib *l = libs; l; l = l->next) {
        if (strcmp(l->name, library) == 0) {
            pthread_mutex_unlock(&libs_lock);
            return l;
        }
    }
    vaka_curl_lib *lib = NULL;
    void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        set_error(error, error_size, "dlopen: ", why ? why : library);
        goto out;
    }
    lib = calloc(1, sizeof *lib);
    if (!lib || !(lib->name = strdup(library))) {
        set_error(error, error_size, "out of memory", NULL);
        goto fail;
    }
    lib->handle = handle;
#define RESOLVE(field, symbol)                                                     \
    do {                                                                           \
        *(void **)(&lib->field) = dlsym(handle, symbol);                           \
        if (!lib->field) {                                                         \
            set_error(error, error_size, "symbol not found in libcurl: ", symbol); \
            goto fail;                                                             \
        }                                                                          \
    } while (0)
    RESOLVE(global_init, "curl_global_init");
    RESOLVE(easy_init, "curl_easy_init");
    RESOLVE(easy_setopt, "curl_easy_setopt");
    RESOLVE(easy_perform, "curl_easy_perform");
    RESOLVE(easy_getinfo, "curl_easy_getinfo");
    RESOLVE(easy_cleanup, "curl_easy_cleanup");
    RESOLVE(easy_reset, "curl_easy_reset");
    RESOLVE(easy_strerror, "curl_easy_strerror");
    RESOLVE(slist_append, "curl_slist_append");
    RESOLVE(slist_free_all, "curl_slist_free_all");
    RESOLVE(version_info, "curl_version_info");
#undef RESOLVE
    // libcurl's OpenSSL, loaded just now, registers OPENSSL_cleanup with atexit() at its first init. Registered
    // after Vaka's own atexit hook (Vaka.start), it would run before it, and the hook's last sends (the session
    // update at exit) would use a cleaned-up OpenSSL: a SIGSEGV at exit. So OpenSSL is initialised first without
    // that registration (OPENSSL_INIT_NO_ATEXIT, OpenSSL >= 1.1.1); the OS reclaims its memory at exit. Other
    // TLS back ends (GnuTLS, NSS) clean up in ELF destructors, which run after every atexit handler.
    {
        int (*openssl_init_crypto)(uint64_t options, const void *settings);
        *(void **)(&openssl_init_crypto) = dlsym(handle, "OPENSSL_init_crypto");
        if (openssl_init_crypto) openssl_init_crypto(UINT64_C(0x00080000) /* OPENSSL_INIT_NO_ATEXIT */, NULL);
    }
    // curl_global_init is reference-counted by libcurl; once per opened library is what we need.
    CURLcode rc = lib->global_init(CURL_GLOBAL_DEFAULT);
    if (rc != CURLE_OK) {
        set_error(error, error_size, "curl_global_init: ", lib->easy_strerror(rc));
        goto fail;
    }
    // Not curl_version(): its string names the LDAP library, and asking libldap for its version initialises
    // Cyrus SASL, which dlopen()s every SASL plugin (nine more libraries) for nothing.
    const curl_version_info_data *info = lib->version_info(CURLVERSION_NOW);
    snprintf(lib->version, sizeof lib->version, "libcurl/%s %s", info && info->version ? info->version : "?",
             info && info->ssl_version ? info->ssl_version : "(no TLS)");
    lib->next = libs;
    libs = lib;
    goto out;
fail:
    if (lib) free(lib->name);
    free(lib);
    lib = NULL;
    if (handle) dlclose(handle);
out:
    pthread_mutex_unlock(&libs_lock);
    return lib;
}

const char *vaka_curl_version(const vaka_curl_lib *lib) { return lib ? lib->version : ""; }

vaka_curl_session *vaka_curl_session_new(vaka_curl_lib *lib) {
    if (!lib) return NULL;
    vaka_curl_session *s = calloc(1, sizeof *s);
    if (s) s->lib = lib;
    return s;
}

void vaka_curl_session_free(vaka_curl_session *session) {
    if (!session) return;
    if (session->easy) session->lib->easy_cleanup(session->easy);
    free(session);
}

int vaka_curl_code_is_permanent(int code) {
    switch (code) {
    case CURLE_UNSUPPORTED_PROTOCOL:  // scheme not http(s), or not built in
    case CURLE_URL_MALFORMAT:         // libcurl cannot parse the URL (host, port, IPv6 literal...)
    case CURLE_NOT_BUILT_IN:          // a feature this libcurl was built without
    case CURLE_FUNCTION_NOT_FOUND:
    case CURLE_BAD_FUNCTION_ARGUMENT:  // an option value libcurl refuses
    case CURLE_UNKNOWN_OPTION:
        return 1;
    default:
        return 0;
    }
}

/// The header block of the origin server's final response: reset at each status line, so 100 Continue and
/// a proxy's CONNECT answer are not mixed into it. CONNECT answers are not even passed here when libcurl
/// knows CURLOPT_SUPPRESS_CONNECT_HEADERS (>= 7.54); with an older libcurl, vaka_curl_post() does not let a
/// block count when curl failed after a CONNECT (see there).
struct header_sink {
    char *data;
    size_t length;
    size_t capacity;
    int failed;
    long status;   // from the last status line ("HTTP/1.1 200 OK", "HTTP/2 429")
    int complete;  // the header block of a final (non-1xx) response ended: its status counts
};

/// The status code of a status line, 0 when there is none (at most 3 digits are read).
static long status_of(const char *line, size_t n) {
    size_t i = 5;
    while (i < n && line[i] != ' ') i++;
    while (i < n && line[i] == ' ') i++;
    long code = 0;
    int digits = 0;
    while (i < n && digits < 3 && line[i] >= '0' && line[i] <= '9') code = code * 10 + (line[i++] - '0'), digits++;
    return digits == 3 ? code : 0;
}

static size_t on_header(char *buffer, size_t size, size_t count, void *userdata) {
    struct header_sink *sink = userdata;
    size_t n = size * count;
    if (n >= 5 && memcmp(buffer, "HTTP/", 5) == 0) {  // a new response starts
        sink->length = 0;
        if (sink->data) sink->data[0] = '\0';
        sink->status = status_of(buffer, n);
        sink->complete = 0;
        return n;
    }
    if (n == 0 || (n <= 2 && (buffer[0] == '\r' || buffer[0] == '\n'))) {  // end of block
        if (sink->status >= 200) sink->complete = 1;
        return n;
    }
    if (sink->failed) return n;
    if (sink->length + n + 1 > sink->capacity) {
        size_t want = sink->capacity ? sink->capacity * 2 : 1024;
        while (want < sink->length + n + 1) want *= 2;
        if (want > (1u << 20)) {  // 1 MiB of headers: keep what we have, ignore the rest
            sink->failed = 1;
            return n;
        }
        char *bigger = realloc(sink->data, want);
        if (!bigger) {
            sink->failed = 1;
            return n;
        }
        sink->data = bigger;
        sink->capacity = want;
    }
    memcpy(sink->data + sink->length, buffer, n);
    sink->length += n;
    sink->data[sink->length] = '\0';
    return n;
}

/// Bytes of response body read at most (VAKA_CURL_MAX_BODY); the body is discarded anyway.
struct body_sink {
    size_t received;
    int capped;  // the transfer was aborted at the cap
};

static size_t on_body(char *buffer, size_t size, size_t count, void *userdata) {
    (void)buffer;
    struct body_sink *sink = userdata;
    size_t n = size * count;
    // Discarded: the uploader needs only the status and headers. A body longer than the cap (an endless
    // or huge answer) is not read on: returning less than `n` makes curl abort with CURLE_WRITE_ERROR,
    // and the status of the headers already received decides (see vaka_curl_post).
    if (n > VAKA_CURL_MAX_BODY - sink->received) {
        sink->capped = 1;
        return 0;
    }
    sink->received += n;
    return n;
}

/// libcurl's progress callback: non-zero (abort the transfer) once the caller's abort flag is set.
static int on_progress(void *clientp, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    const int *flag = clientp;
    return flag && __atomic_load_n(flag, __ATOMIC_ACQUIRE) ? 1 : 0;
}

void vaka_curl_abort(int *flag) {
    if (flag) __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
}

static vaka_curl_failure finish(vaka_curl_session *s, vaka_curl_result *result, CURLcode rc) {
    result->curl_code = (int)rc;
    // A code is permanent only when it came from our side, before any connection: once a server was
    // reached, what it sent decides (e.g. a non-HTTP answer is CURLE_UNSUPPORTED_PROTOCOL "HTTP/0.9 not
    // allowed", which a fixed server or a later attempt may not repeat).
    char *ip = NULL;
    int connected = s->lib->easy_getinfo(s->easy, CURLINFO_PRIMARY_IP, &ip) == CURLE_OK && ip && ip[0];
    result->failure = vaka_curl_code_is_permanent(rc) && !connected ? VAKA_CURL_PERMANENT : VAKA_CURL_TRANSIENT;
    const char *text = s->error[0] ? s->error : s->lib->easy_strerror(rc);
    if (result->proxy_status > 0 && result->proxy_status != 200)
        snprintf(result->error, sizeof result->error, "proxy answered CONNECT with %ld (curl %d: %s)",
                 result->proxy_status, (int)rc, text);
    else
        snprintf(result->error, sizeof result->error, "curl %d: %s", (int)rc, text);
    return result->failure;
}

vaka_curl_failure vaka_curl_post(vaka_curl_session *s, const char *url, const char *const *header_lines,
                                 size_t header_count, const void *body, size_t body_length, long timeout_ms,
                                 const int *abort_flag, vaka_curl_result *result) {
    memset(result, 0, sizeof *result);
    if (!s->easy && !(s->easy = s->lib->easy_init())) {
        result->failure = VAKA_CURL_TRANSIENT;
        snprintf(result->error, sizeof result->error, "curl_easy_init failed");
        return result->failure;
    }
    CURL *e = s->easy;
    s->lib->easy_reset(e);  // keeps the connection cache: keep-alive across requests
    s->error[0] = '\0';
    struct curl_slist *headers = NULL;
    for (size_t i = 0; i < header_count; i++) {
        if (!header_lines[i]) continue;  // a line the caller could not allocate
        struct curl_slist *next = s->lib->slist_append(headers, header_lines[i]);
        if (!next) {
            s->lib->slist_free_all(headers);
            result->failure = VAKA_CURL_TRANSIENT;
            snprintf(result->error, sizeof result->error, "out of memory for headers");
            return result->failure;
        }
        headers = next;
    }
    // Without this libcurl sends "Expect: 100-continue" for large bodies and waits up to 1 s for it.
    struct curl_slist *next = s->lib->slist_append(headers, "Expect:");
    if (next) headers = next;
    struct header_sink sink = {0};
    struct body_sink body_sink = {0};
    if (timeout_ms < 1) timeout_ms = 1;

    int connect_headers_suppressed = 0;  // libcurl >= 7.54 knows CURLOPT_SUPPRESS_CONNECT_HEADERS
    CURLcode rc = CURLE_OK;
#define SET(option, value)                                   \
    do {                                                     \
        rc = s->lib->easy_setopt(e, option, value);          \
        if (rc != CURLE_OK) goto done;                       \
    } while (0)
    SET(CURLOPT_ERRORBUFFER, s->error);
    SET(CURLOPT_NOSIGNAL, 1L);  // no SIGALRM for DNS timeouts: this runs on a background thread
    SET(CURLOPT_URL, url);
    rc = s->lib->easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    if (rc == CURLE_UNKNOWN_OPTION) rc = s->lib->easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    if (rc != CURLE_OK) goto done;
    SET(CURLOPT_FOLLOWLOCATION, 0L);
    SET(CURLOPT_POST, 1L);
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_length);
    SET(CURLOPT_POSTFIELDS, body_length ? body : "");
    SET(CURLOPT_HTTPHEADER, headers);
    SET(CURLOPT_TIMEOUT_MS, timeout_ms);
    SET(CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    SET(CURLOPT_HEADERFUNCTION, on_header);
    SET(CURLOPT_HEADERDATA, &sink);
    SET(CURLOPT_WRITEFUNCTION, on_body);
    SET(CURLOPT_WRITEDATA, &body_sink);
    if (abort_flag) {
        SET(CURLOPT_XFERINFOFUNCTION, on_progress);
        SET(CURLOPT_XFERINFODATA, (void *)abort_flag);
        SET(CURLOPT_NOPROGRESS, 0L);
    }
    // Through an https proxy tunnel, the proxy's answer to CONNECT ("200 Connection established", "407 Proxy
    // Authentication Required") must never reach the header callback as if the server had answered.
    connect_headers_suppressed = s->lib->easy_setopt(e, CURLOPT_SUPPRESS_CONNECT_HEADERS, 1L) == CURLE_OK;
    // OpenSSL's standard variables for a private CA (libcurl's built-in bundle path would override them).
    const char *ca_file = getenv("SSL_CERT_FILE");
    if (ca_file && ca_file[0]) SET(CURLOPT_CAINFO, ca_file);
    const char *ca_dir = getenv("SSL_CERT_DIR");
    if (ca_dir && ca_dir[0]) SET(CURLOPT_CAPATH, ca_dir);
#undef SET
    rc = s->lib->easy_perform(e);
done:
    s->lib->slist_free_all(headers);
    // The easy handle keeps pointers to our header list and sink: clear them before they go away.
    s->lib->easy_setopt(e, CURLOPT_HTTPHEADER, (struct curl_slist *)NULL);
    s->lib->easy_setopt(e, CURLOPT_HEADERDATA, (void *)NULL);
    s->lib->easy_setopt(e, CURLOPT_HEADERFUNCTION, (curl_write_callback)NULL);
    s->lib->easy_setopt(e, CURLOPT_WRITEDATA, (void *)NULL);
    s->lib->easy_setopt(e, CURLOPT_NOPROGRESS, 1L);
    s->lib->easy_setopt(e, CURLOPT_XFERINFODATA, (void *)NULL);
    long status = 0;
    long connect_code = 0;
    if (s->lib->easy_getinfo(e, CURLINFO_HTTP_CONNECTCODE, &connect_code) == CURLE_OK && connect_code > 0)
        result->proxy_status = connect_code;
    if (rc != CURLE_OK) {
        // The status line and the whole header block of the origin server's final response arrived, then
        // the body failed (our cap, a partial body, a timeout or a reset while reading it): the server has
        // decided, and its status counts. Anything earlier is a failure to get an answer, and so is any
        // failure after a proxy CONNECT when libcurl could not keep the CONNECT answer out of the sink (the
        // block seen may be the proxy's: "200 Connection established" then a failed TLS handshake, or 407).
        if (!sink.complete || sink.status < 200 || (connect_code > 0 && !connect_headers_suppressed)) {
            free(sink.data);
            return finish(s, result, rc);
        }
        status = sink.status;
        result->curl_code = (int)rc;
        if (body_sink.capped) {
            snprintf(result->error, sizeof result->error, "response body not read past %u bytes", (unsigned)VAKA_CURL_MAX_BODY);
        } else {
            const char *text = s->error[0] ? s->error : s->lib->easy_strerror(rc);
            snprintf(result->error, sizeof result->error, "response body cut short (curl %d: %s)", (int)rc, text);
        }
    } else {
        s->lib->easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    }
    if (status <= 0) {
        free(sink.data);
        result->failure = VAKA_CURL_TRANSIENT;
        snprintf(result->error, sizeof result->error, "no HTTP status in the response");
        return result->failure;
    }
    result->failure = VAKA_CURL_OK;
    result->status = status;
    result->headers = sink.data;
    result->headers_length = sink.data ? sink.length : 0;
    return VAKA_CURL_OK;
}

void vaka_curl_result_free(vaka_curl_result *result) {
    if (!result) return;
    free(result->headers);
    result->headers = NULL;
    result->headers_length = 0;
}
