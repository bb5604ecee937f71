// vaka_curl: the HTTP client of Vaka's delivery thread, libcurl opened with dlopen() at the first send.
//
// libcurl is NOT a load-time dependency of Vaka (no -lcurl): vaka_curl_open() loads "libcurl.so.4" (or the
// given name) with dlopen and resolves the curl_easy_* functions it needs with dlsym, so a program that never
// sends an envelope never maps libcurl, and a machine without libcurl gets an error string, not a failed start.
// Compiled against Debian's curl headers (libcurl4-openssl-dev) for the constants and option numbers only.
//
// Not for the signal handler: everything here may allocate and take locks.
#ifndef VAKA_CURL_H
#define VAKA_CURL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/// An opened libcurl (function pointers resolved from one dlopen handle). Opaque; never freed (one per
/// library name per process, a few hundred bytes).
typedef struct vaka_curl_lib vaka_curl_lib;

/// One reusable connection slot (a CURL easy handle and its libcurl). Keeps connections alive between
/// requests. Not thread-safe: one request at a time per session.
typedef struct vaka_curl_session vaka_curl_session;

/// Opens libcurl: dlopen(`library`, RTLD_NOW | RTLD_LOCAL), dlsym of curl_global_init, curl_easy_init,
/// curl_easy_setopt, curl_easy_perform, curl_easy_getinfo, curl_easy_cleanup, curl_easy_reset, curl_easy_strerror,
/// curl_slist_append, curl_slist_free_all, curl_version_info; curl_global_init(CURL_GLOBAL_DEFAULT) once.
/// Thread-safe; the same name returns the same object. `library` NULL means "libcurl.so.4".
/// Returns NULL on failure with a one-line reason (dlerror text or the missing symbol) in `error`
/// (NUL-terminated, at most `error_size` bytes including the NUL).
vaka_curl_lib *vaka_curl_open(const char *library, char *error, size_t error_size);

/// The loaded libcurl's version and TLS library, e.g. "libcurl/7.88.1 OpenSSL/3.0.17".
const char *vaka_curl_version(const vaka_curl_lib *lib);

/// Creates a session (its CURL easy handle is created at the first request). NULL only when out of memory.
vaka_curl_session *vaka_curl_session_new(vaka_curl_lib *lib);

/// Closes the session's connections and frees it. NULL is ignored.
void vaka_curl_session_free(vaka_curl_session *session);

/// How a request ended when there is no HTTP status.
typedef enum vaka_curl_failure {
    /// An HTTP response was received (`status` is set).
    VAKA_CURL_OK = 0,
    /// No response, but a later attempt may work: could not resolve or connect, timed out, connection
    /// reset, send/receive error, TLS handshake or certificate problem, unparsable response...
    VAKA_CURL_TRANSIENT = 1,
    /// Can never work in this process: unsupported or disabled scheme, malformed URL, an option libcurl does
    /// not know or refuses, libcurl missing a feature — each only when no connection was made (once a server
    /// answered, what it sent is never a permanent error: a non-HTTP answer is transient). Retrying is pointless.
    VAKA_CURL_PERMANENT = 2,
} vaka_curl_failure;

/// Most bytes of a response body read (64 KiB): Vaka needs only the status and headers. A longer body (a
/// huge Content-Length, endless chunks) is not read on: the transfer is aborted and the status counts.
#define VAKA_CURL_MAX_BODY ((size_t)64 * 1024)

/// The outcome of vaka_curl_post().
typedef struct vaka_curl_result {
    /// VAKA_CURL_OK when an HTTP response came back (any status), else why not.
    vaka_curl_failure failure;
    /// The HTTP status (e.g. 200, 429); 0 when `failure` is not VAKA_CURL_OK.
    long status;
    /// The CURLcode of curl_easy_perform (0 = CURLE_OK), or of the failing curl_easy_setopt.
    int curl_code;
    /// One line: curl's error buffer or curl_easy_strerror() on failure. With VAKA_CURL_OK it is empty, or a
    /// note saying the response body was not read to its end (over VAKA_CURL_MAX_BODY, or curl failed after
    /// the header block; `curl_code` then holds curl's code) while the status still counts.
    char error[256];
    /// The final response's header block as received ("Name: value\r\n" lines, without the status line;
    /// earlier blocks such as 100 Continue are discarded). malloc'ed, NUL-terminated; free with
    /// vaka_curl_result_free(). NULL when there were none.
    char *headers;
    /// Length of `headers` in bytes, without the NUL.
    size_t headers_length;
    /// The status a proxy answered the CONNECT with (CURLINFO_HTTP_CONNECTCODE: e.g. 200, 407), 0 when no
    /// tunnel was asked for. Never the server's answer: a failure after a CONNECT is a transport failure
    /// (VAKA_CURL_TRANSIENT), and `status` is only ever the origin server's final response.
    long proxy_status;
} vaka_curl_result;

/// POSTs `body` (`body_length` bytes) to `url` with the given header lines ("Name: value", `header_count` of
/// them; NULL entries are skipped) and fills `result`. Blocks the calling thread for at most `timeout_ms` (CURLOPT_TIMEOUT_MS; connect
/// bounded by the same, CURLOPT_CONNECTTIMEOUT_MS). Only http and https are allowed; redirects are not
/// followed; the response body is discarded, and at most VAKA_CURL_MAX_BODY bytes of it are read. A response
/// whose status line and header block arrived is a response (VAKA_CURL_OK, its status) even when curl
/// then fails on the body (cap, partial body, timeout, reset after the headers); no signals are used (CURLOPT_NOSIGNAL), so any thread may call
/// it. The standard proxy variables (http_proxy, https_proxy, all_proxy, no_proxy) apply, as libcurl reads them;
/// SSL_CERT_FILE / SSL_CERT_DIR, when set, replace the system CA bundle / directory (CURLOPT_CAINFO/CAPATH).
/// `abort_flag` (may be NULL): once another thread sets it (vaka_curl_abort), the transfer in progress ends
/// within about a second (libcurl's progress callback, called at least about once a second while it waits) with
/// a transient failure (curl 42, "Callback aborted"), and every later one ends before it connects.
/// Returns `result->failure`.
vaka_curl_failure vaka_curl_post(vaka_curl_session *session, const char *url, const char *const *header_lines,
                                 size_t header_count, const void *body, size_t body_length, long timeout_ms,
                                 const int *abort_flag, vaka_curl_result *result);

/// Sets `flag` (atomically, from any thread): the transfers given it end (see vaka_curl_post).
void vaka_curl_abort(int *flag);

/// Frees `result->headers` (and sets it to NULL).
void vaka_curl_result_free(vaka_curl_result *result);

/// Whether a CURLcode means retrying can never help (see VAKA_CURL_PERMANENT). Exposed for tests.
int vaka_curl_code_is_permanent(int curl_code);

#ifdef __cplusplus
}
#endif

#endif
