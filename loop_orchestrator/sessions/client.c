/*
 * lo-session: the compiled client of what sessions run (docs/design.md, "The hook's fast
 * path"). `sessions/native.py` builds it with this machine's C compiler, with a few
 * generated lines first that name this install's two Python command lines:
 *
 *   LO_FULL  the full command line (`python -m loop_orchestrator`, `$LO_ORCH_BIN` before)
 *   LO_FAST  the standard-library client (`python -I -S .../sessions/fast_entry.py`)
 *
 * Usage (`$LO_ORCH_HOOK` is `lo-session hook`, `$LO_ORCH_BIN` is `lo-session`):
 *
 *   lo-session hook EVENT                  a hook event, its JSON on stdin
 *   lo-session signal PHASE [--note TEXT]  a session's report
 *   lo-session ARGS...                     anything else: LO_FULL ARGS...
 *
 * It only carries the report, as the Python client does: one header line and the event's
 * JSON as it came, to the supervisor's inbox socket; the supervisor reads, trims, judges
 * and renders the answer (`sessions/listener.py`, wire 1), and this program prints it and
 * exits with its code. Whatever it does not handle itself goes to LO_FAST with the same
 * arguments and the same standard input (a session located by its folder, a payload over
 * RAW_MAX, no supervisor listening, no answer, a signal the Python client must explain),
 * so every path ends where the Python client would have: it waits for a supervisor being
 * restarted, leaves the report in the inbox folder, prints the same errors.
 *
 * Only the standard C library and Linux's sockets; no allocation but the input's buffer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef LO_FULL_ARGS
#error "built by loop_orchestrator/sessions/native.py, which defines LO_FULL and LO_FAST"
#endif

static const char *const LO_FULL[] = {LO_FULL_ARGS, NULL};
static const char *const LO_FAST[] = {LO_FAST_ARGS, NULL};

/* the largest event JSON sent as it came (larger ones are trimmed by the Python client) */
#define RAW_MAX (256 * 1024)
/* the largest answer read (the supervisor's are a few hundred bytes) */
#define REPLY_MAX (1024 * 1024)
/* how long an answer may take: inbox.CLIENT_TIMEOUT; a PermissionRequest waits for a
 * person up to hooks.PERMISSION_WAIT (the supervisor holds the connection meanwhile) */
#define CLIENT_TIMEOUT 10
#define PERMISSION_TIMEOUT 3600

/* SHA-256 (FIPS 180-4), for the inbox's address: sha256(realpath(run dir)) ------------ */

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(uint32_t h[8], const unsigned char *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = k + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) +
                      K256[i] + w[i];
        uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += k;
}

/* the first 32 hex digits of SHA-256(data): what inbox.address takes */
static void sha256_hex32(const unsigned char *data, size_t n, char out[33]) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    unsigned char tail[128];
    size_t full = n - n % 64;
    for (size_t i = 0; i < full; i += 64) sha256_block(h, data + i);
    size_t rest = n - full;
    memset(tail, 0, sizeof tail);
    memcpy(tail, data + full, rest);
    tail[rest] = 0x80;
    size_t blocks = rest + 9 <= 64 ? 1 : 2;
    uint64_t bits = (uint64_t)n * 8;
    for (int i = 0; i < 8; i++) tail[blocks * 64 - 1 - i] = (unsigned char)(bits >> (8 * i));
    for (size_t i = 0; i < blocks; i++) sha256_block(h, tail + 64 * i);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        unsigned char byte = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
        out[2 * i] = hex[byte >> 4];
        out[2 * i + 1] = hex[byte & 15];
    }
    out[32] = '\0';
}

/* what hooks.py accepts ------------------------------------------------------------------ */

/* hooks.is_event_name: 1 to 40 ASCII letters */
static int is_event_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 40) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z'))) return 0;
    return 1;
}

/* hooks.is_task_id (plan validation's ID_RE): [a-z0-9][a-z0-9-]{0,39} */
static int is_task_id(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 40) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (c == '-' && i > 0);
        if (!ok) return 0;
    }
    return 1;
}

static int is_json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* handing over -------------------------------------------------------------------------- */

/* exec PREFIX followed by ARGS (argc of them); with INPUT, standard input is first replaced
 * by a file holding those N bytes (what was read, so the next program reads it again).
 * Returns only when that failed. */
static void hand_over(const char *const *prefix, int argc, char **args, const char *input,
                      size_t n) {
    signal(SIGPIPE, SIG_DFL); /* (an ignored signal would stay ignored in the next program) */
    if (input != NULL) {
        int fd = memfd_create("lo-session-stdin", MFD_CLOEXEC);
        if (fd < 0) return;
        size_t done = 0;
        while (done < n) {
            ssize_t w = write(fd, input + done, n - done);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) return;
            done += (size_t)w;
        }
        if (lseek(fd, 0, SEEK_SET) != 0 || dup2(fd, 0) != 0) return;
    }
    size_t k = 0;
    while (prefix[k] != NULL) k++;
    char **argv = calloc(k + (size_t)argc + 1, sizeof *argv);
    if (argv == NULL) return;
    for (size_t i = 0; i < k; i++) argv[i] = (char *)prefix[i];
    for (int i = 0; i < argc; i++) argv[k + (size_t)i] = args[i];
    execv(argv[0], argv);
}

/* the whole of standard input (NULL on a read error) */
static char *read_input(size_t *n) {
    size_t cap = 16384, len = 0;
    char *buf = malloc(cap);
    if (buf == NULL) return NULL;
    for (;;) {
        if (len == cap) {
            char *more = realloc(buf, cap * 2);
            if (more == NULL) {
                free(buf);
                return NULL;
            }
            buf = more;
            cap *= 2;
        }
        ssize_t r = read(0, buf + len, cap - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            free(buf);
            return NULL;
        }
        if (r == 0) break;
        len += (size_t)r;
    }
    *n = len;
    return buf;
}

/* the supervisor's socket --------------------------------------------------------------- */

/* connected to the inbox of RUN_DIR (inbox.address), or -1 when none listens */
static int connect_inbox(const char *run_dir, int timeout) {
    char real[4096 + 1];
    if (realpath(run_dir, real) == NULL) return -1;
    char digest[33];
    sha256_hex32((const unsigned char *)real, strlen(real), digest);
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    int name = snprintf(addr.sun_path + 1, sizeof addr.sun_path - 1, "lo-orch/%s", digest);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)name);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct timeval tv = {timeout, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&addr, len) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int write_all(int fd, const char *data, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, data, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        data += w;
        n -= (size_t)w;
    }
    return 0;
}

/* send the message, read the answer ("lo-orch-reply EXIT NOUT NERR\n", then the bytes it
 * prints on standard output and error), print it; its exit code, or -1 (no answer) */
static int exchange(int fd, const char *head, size_t head_len, const char *body, size_t n) {
    if (write_all(fd, head, head_len) != 0 || (n && write_all(fd, body, n) != 0)) {
        close(fd);
        return -1;
    }
    shutdown(fd, SHUT_WR);
    static char reply[REPLY_MAX + 1];
    size_t len = 0;
    for (;;) {
        if (len == REPLY_MAX) break;
        ssize_t r = read(fd, reply + len, REPLY_MAX - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            close(fd);
            return -1; /* (a timeout too) */
        }
        if (r == 0) break;
        len += (size_t)r;
    }
    close(fd);
    reply[len] = '\0';
    char *nl = memchr(reply, '\n', len);
    int code;
    size_t nout, nerr;
    int used = 0;
    if (nl == NULL ||
        sscanf(reply, "lo-orch-reply %d %zu %zu%n", &code, &nout, &nerr, &used) != 3 ||
        reply + used != nl || code < 0 || code > 255) {
        return -1;
    }
    size_t at = (size_t)(nl - reply) + 1;
    if (nout > len - at || nerr != len - at - nout) return -1;
    if (write_all(1, reply + at, nout) != 0 || write_all(2, reply + at + nout, nerr) != 0) {
        return code; /* (what could be printed was; the decision stands) */
    }
    return code;
}

/* the status file of TASK in RUN_DIR exists (hooks.locate) */
static int task_known(const char *run_dir, const char *task) {
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/status/%s.json", run_dir, task);
    struct stat st;
    return n > 0 && (size_t)n < sizeof path && stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* `lo-session hook EVENT` ---------------------------------------------------------------- */

static int hook(int argc, char **argv) {
    const char *event = argv[2];
    if (!is_event_name(event)) return 0;
    const char *task = getenv("LO_ORCH_TASK"), *run_dir = getenv("LO_ORCH_RUN_DIR");
    if (task == NULL || *task == '\0' || run_dir == NULL || *run_dir == '\0') {
        hand_over(LO_FAST, argc - 1, argv + 1, NULL, 0); /* located by its folder */
        return 0;
    }
    if (!is_task_id(task) || run_dir[0] != '/' || !task_known(run_dir, task)) return 0;
    if (isatty(0)) return 0;
    size_t n = 0;
    char *input = read_input(&n);
    if (input == NULL) return 0;
    size_t blank = 0;
    while (blank < n && is_json_space(input[blank])) blank++;
    if (blank == n) return 0; /* no event: nothing to report */
    int fd = -1;
    if (n <= RAW_MAX) {
        int wait = strcmp(event, "PermissionRequest") == 0 ? PERMISSION_TIMEOUT + 60
                                                            : CLIENT_TIMEOUT;
        fd = connect_inbox(run_dir, wait);
    }
    if (fd >= 0) {
        const char *bin = getenv("LO_ORCH_BIN");
        char head[256];
        int len = snprintf(head, sizeof head,
                           "{\"type\": \"hook\", \"event\": \"%s\", \"task\": \"%s\", \"bin\": "
                           "\"%s\", \"wire\": 1}\n",
                           event, task, bin && *bin ? "$LO_ORCH_BIN" : "lo-orch");
        int code = exchange(fd, head, (size_t)len, input, n);
        if (code >= 0) return code;
    }
    hand_over(LO_FAST, argc - 1, argv + 1, input, n); /* it leaves the event for the next */
    return 0;
}

/* `lo-session signal PHASE [--note TEXT]` ------------------------------------------------ */

/* NOTE as a JSON string into OUT (at least 6 * strlen + 3 bytes) */
static void json_string(const char *note, char *out) {
    static const char hex[] = "0123456789abcdef";
    char *o = out;
    *o++ = '"';
    for (const unsigned char *p = (const unsigned char *)note; *p; p++) {
        if (*p == '"' || *p == '\\') {
            *o++ = '\\';
            *o++ = (char)*p;
        } else if (*p < 0x20) {
            memcpy(o, "\\u00", 4);
            o[4] = hex[*p >> 4];
            o[5] = hex[*p & 15];
            o += 6;
        } else {
            *o++ = (char)*p; /* UTF-8 as it is */
        }
    }
    *o++ = '"';
    *o = '\0';
}

static int signal_(int argc, char **argv) {
    const char *phase = argv[2];
    const char *note = NULL;
    int simple = strcmp(phase, "plan_ready") == 0 || strcmp(phase, "impl_done") == 0 ||
                 strcmp(phase, "blocked") == 0;
    if (simple && argc == 5 && strcmp(argv[3], "--note") == 0) {
        note = argv[4];
    } else if (simple && argc == 4 && strncmp(argv[3], "--note=", 7) == 0) {
        note = argv[3] + 7;
    } else if (argc != 3) {
        simple = 0; /* --task, --dispute, --repo, --help...: the Python client decides */
    }
    const char *task = getenv("LO_ORCH_TASK"), *run_dir = getenv("LO_ORCH_RUN_DIR");
    simple = simple && task != NULL && run_dir != NULL && is_task_id(task) &&
             run_dir[0] == '/' && task_known(run_dir, task);
    if (simple && strcmp(phase, "blocked") == 0) {
        const char *p = note;
        while (p != NULL && (*p == ' ' || (*p >= '\t' && *p <= '\r'))) p++;
        simple = p != NULL && *p != '\0'; /* (no note: the Python client says what to do) */
    }
    int fd = simple ? connect_inbox(run_dir, CLIENT_TIMEOUT) : -1;
    if (fd >= 0) {
        size_t cap = (note ? 6 * strlen(note) : 0) + 256;
        char *head = malloc(cap);
        char *quoted = malloc(cap);
        if (head != NULL && quoted != NULL) {
            if (note != NULL)
                json_string(note, quoted);
            else
                strcpy(quoted, "null");
            int len = snprintf(head, cap,
                               "{\"type\": \"signal\", \"task\": \"%s\", \"phase\": \"%s\", "
                               "\"note\": %s, \"wire\": 1}\n",
                               task, phase, quoted);
            int code = exchange(fd, head, (size_t)len, NULL, 0);
            if (code >= 0) return code;
        } else {
            close(fd);
        }
    }
    hand_over(LO_FAST, argc - 1, argv + 1, NULL, 0); /* it waits, leaves or explains */
    perror("lo-orch signal");
    return 1;
}

int main(int argc, char **argv) {
    /* a supervisor or a reader that went away is an answer not given, never a crash */
    signal(SIGPIPE, SIG_IGN);
    if (argc == 2 && strcmp(argv[1], "--lo-session-probe") == 0) {
        puts("lo-session 1"); /* native.PROBE: the build runs here */
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "hook") == 0 && argv[2][0] != '-') return hook(argc, argv);
    if (argc >= 3 && strcmp(argv[1], "signal") == 0) return signal_(argc, argv);
    hand_over(LO_FULL, argc - 1, argv + 1, NULL, 0);
    perror("lo-orch");
    return 127;
}
