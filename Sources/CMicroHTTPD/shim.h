#ifndef JOTTER_CMICROHTTPD_SHIM_H
#define JOTTER_CMICROHTTPD_SHIM_H

#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <malloc.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <microhttpd.h>

/// The limits Jotter sets on every daemon; plain values so Swift can fill it in.
typedef struct {
    unsigned int flags;
    unsigned int thread_pool_size;
    unsigned int connection_limit;
    unsigned int per_ip_connection_limit;
    unsigned int connection_timeout_seconds;
    size_t connection_memory_limit;
    const char *tls_key_pem;   /* NULL: plain HTTP */
    const char *tls_cert_pem;
    MHD_NotifyConnectionCallback notify_connection; /* every connection's start and end */
    void *(*uri_log)(void *cls, const char *uri, struct MHD_Connection *connection); /* each request line */
    void *callbacks_cls;
} jotter_mhd_config;

static void jotter_mhd_silent_logger(void *cls, const char *fmt, va_list ap) {
    /* libmicrohttpd's own messages can quote request data; Jotter logs error kinds itself. */
    (void)cls; (void)fmt; (void)ap;
}

/// MHD_start_daemon is variadic, which Swift cannot call: this wrapper passes the options as
/// an MHD_OPTION_ARRAY. See microhttpd.h, "MHD_OPTION_ARRAY".
static inline struct MHD_Daemon *jotter_mhd_start(
    const jotter_mhd_config *config,
    MHD_AccessHandlerCallback handler, void *handler_cls,
    MHD_RequestCompletedCallback completed, void *completed_cls)
{
    /* No listening socket of its own: connections come from jotter_acceptor (below). */
    unsigned int flags = config->flags | MHD_USE_NO_LISTEN_SOCKET;
    if (config->tls_key_pem != NULL && config->tls_cert_pem != NULL) flags |= MHD_USE_TLS;
    struct MHD_OptionItem options[] = {
        { MHD_OPTION_THREAD_POOL_SIZE, config->thread_pool_size, NULL },
        { MHD_OPTION_CONNECTION_LIMIT, config->connection_limit, NULL },
        { MHD_OPTION_PER_IP_CONNECTION_LIMIT, config->per_ip_connection_limit, NULL },
        { MHD_OPTION_CONNECTION_TIMEOUT, config->connection_timeout_seconds, NULL },
        { MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)config->connection_memory_limit, NULL },
        { MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, completed_cls },
        { MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)config->notify_connection, config->callbacks_cls },
        /* Called with the raw request-target before it is unescaped; its result becomes *req_cls, and with
           it set libmicrohttpd reports every request whose request line it parsed to NOTIFY_COMPLETED,
           also those it refuses by itself (microhttpd.h, MHD_OPTION_URI_LOG_CALLBACK; connection.c). */
        { MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)config->uri_log, config->callbacks_cls },
        { MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)jotter_mhd_silent_logger, NULL },
        { config->tls_key_pem ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, (void *)config->tls_key_pem },
        { MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)config->tls_cert_pem },
        /* TLS 1.2 and 1.3 only: GnuTLS's NORMAL also offers 1.0 and 1.1 (with SHA-1 CBC suites), which no
           phone Jotter serves needs and which no client should be offered. */
        { MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)"NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2" },
        { MHD_OPTION_END, 0, NULL },
    };
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, handler_cls,
                            MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}

/// Accepts on Jotter's listening socket, on a thread of its own, and hands each connection to
/// libmicrohttpd with MHD_add_connection, which gives it to a worker thread chosen by its descriptor
/// (daemon.c: `(i + client_socket) % worker_pool_size`), so the workers share the connections. When
/// every worker waits on the listening socket itself, a burst of connects (16 from wrk) often lands on
/// whichever woke first: one thread then serves everything and the other idles (measured: 52,000 req/s
/// against 71,000 with both at work).
///
/// The daemon it hands connections to can be switched while it runs (`jotter_acceptor_switch`): LAN mode
/// starts a daemon with a new certificate when the machine's addresses change, and the old one serves
/// the connections it has until they end.
typedef struct {
    int listen_fd;
    struct MHD_Daemon *daemon;  /* guarded by lock */
    pthread_mutex_t lock;
    int stopping;
    pthread_t thread;
} jotter_acceptor;

static void *jotter_acceptor_run(void *argument) {
    jotter_acceptor *acceptor = argument;
    (void)prctl(PR_SET_NAME, "jotter-accept", 0, 0, 0);
    struct pollfd listener = { acceptor->listen_fd, POLLIN, 0 };
    while (!__atomic_load_n(&acceptor->stopping, __ATOMIC_ACQUIRE)) {
        /* A timeout too, so a stop is seen even if shutdown() did not wake the poll. */
        if (poll(&listener, 1, 1000) <= 0) continue;
        for (int accepted = 0; accepted < 64; accepted++) {
            struct sockaddr_storage address;
            socklen_t length = sizeof address;
            int fd = (int)syscall(SYS_accept4, acceptor->listen_fd, (struct sockaddr *)&address, &length,
                                  SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED) continue;
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                    /* Out of descriptors or memory: give open connections a moment to end. */
                    struct timespec pause = { 0, 50 * 1000 * 1000 };
                    nanosleep(&pause, NULL);
                }
                break;
            }
            /* Refused (its worker is full, the daemon stopping): libmicrohttpd closes fd itself. Under the
               lock, so that once a switch returns no connection goes to the daemon it replaced. */
            pthread_mutex_lock(&acceptor->lock);
            (void)MHD_add_connection(acceptor->daemon, fd, (struct sockaddr *)&address, length);
            pthread_mutex_unlock(&acceptor->lock);
        }
    }
    return NULL;
}

/// Starts accepting on `listen_fd` (non-blocking, listening) for `daemon`; NULL if no thread could start.
static inline jotter_acceptor *jotter_acceptor_start(int listen_fd, struct MHD_Daemon *daemon) {
    jotter_acceptor *acceptor = calloc(1, sizeof *acceptor);
    if (acceptor == NULL) return NULL;
    acceptor->listen_fd = listen_fd;
    acceptor->daemon = daemon;
    if (pthread_mutex_init(&acceptor->lock, NULL) != 0) {
        free(acceptor);
        return NULL;
    }
    if (pthread_create(&acceptor->thread, NULL, jotter_acceptor_run, acceptor) != 0) {
        pthread_mutex_destroy(&acceptor->lock);
        free(acceptor);
        return NULL;
    }
    return acceptor;
}

/// Hands new connections to `daemon` from now on; returns the daemon they went to before. Once it
/// returns, no connection is added to the old daemon any more.
static inline struct MHD_Daemon *jotter_acceptor_switch(jotter_acceptor *acceptor, struct MHD_Daemon *daemon) {
    pthread_mutex_lock(&acceptor->lock);
    struct MHD_Daemon *old = acceptor->daemon;
    acceptor->daemon = daemon;
    pthread_mutex_unlock(&acceptor->lock);
    return old;
}

/// The connections `daemon` holds (over its worker threads), or UINT_MAX if it cannot tell.
/// MHD_get_daemon_info is variadic.
static inline unsigned int jotter_mhd_connection_count(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return info == NULL ? (unsigned int)-1 : info->num_connections;
}

/// Stops accepting and waits for the thread; connections still in the backlog are refused. The
/// listening socket stays open (its owner closes it).
static inline void jotter_acceptor_stop(jotter_acceptor *acceptor) {
    __atomic_store_n(&acceptor->stopping, 1, __ATOMIC_RELEASE);
    (void)shutdown(acceptor->listen_fd, SHUT_RDWR);  /* wakes the poll at once on Linux */
    pthread_join(acceptor->thread, NULL);
    pthread_mutex_destroy(&acceptor->lock);
    free(acceptor);
}

/// The client's IP address as text ("" if unknown). MHD_get_connection_info is variadic.
static inline void jotter_mhd_client_address(struct MHD_Connection *connection, char *buffer, size_t size) {
    buffer[0] = 0;
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (info == NULL || info->client_addr == NULL) return;
    const struct sockaddr *address = info->client_addr;
    if (address->sa_family == AF_INET) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)address)->sin_addr, buffer, (socklen_t)size);
    } else if (address->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)address)->sin6_addr, buffer, (socklen_t)size);
    }
}

/// The socket of a connection (-1 if unknown). MHD_get_connection_info is variadic.
static inline int jotter_mhd_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL ? -1 : info->connect_fd;
}

/// What NOTIFY_CONNECTION stored in the connection's socket context (Jotter stores a number there).
static inline uintptr_t jotter_mhd_socket_context(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info == NULL ? 0 : (uintptr_t)info->socket_context;
}

/// Bytes from the request line's first byte to the end of the blank line after the headers.
static inline size_t jotter_mhd_header_size(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    return info == NULL ? 0 : info->header_size;
}

/// The status of the response queued on the connection (0 if none), also one libmicrohttpd made itself.
static inline unsigned int jotter_mhd_queued_status(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_HTTP_STATUS);
    return info == NULL ? 0 : info->http_status;
}

/// Whether the client has already closed its sending side (a read would see end-of-file now). Peeks, so
/// nothing is consumed; for TLS it sees the TCP stream, where a FIN is a FIN as well.
static inline int jotter_mhd_peer_finished(struct MHD_Connection *connection) {
    int fd = jotter_mhd_connection_fd(connection);
    char byte;
    return fd >= 0 && recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/// How many bytes the peer has sent on this TCP connection so far (Linux's tcpi_bytes_received, 4.1+), or
/// -1 if the kernel does not say. Read from TCP_INFO's bytes: `struct tcp_info` is declared differently by
/// glibc's and Linux's headers, which cannot both be in one Swift build; the field's place is fixed by
/// Linux's ABI (fields are only ever added at the end): byte 128, 8 bytes.
static inline long long jotter_mhd_bytes_received(struct MHD_Connection *connection) {
    enum { tcp_info_option = 11, bytes_received_offset = 128 };
    int fd = jotter_mhd_connection_fd(connection);
    unsigned char info[256];
    socklen_t size = sizeof info;
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, tcp_info_option, info, &size) != 0) return -1;
    if (size < bytes_received_offset + sizeof(uint64_t)) return -1;
    uint64_t received;
    memcpy(&received, info + bytes_received_offset, sizeof received);
    return (long long)received;
}

/// Gives freed heap memory back to the system (glibc; malloc.h).
static inline void jotter_malloc_trim(void) {
    (void)malloc_trim(0);
}

#endif
