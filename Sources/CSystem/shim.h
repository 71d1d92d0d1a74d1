#ifndef JOTTER_CSYSTEM_SHIM_H
#define JOTTER_CSYSTEM_SHIM_H

/* Linux calls that glibc declares only under _GNU_SOURCE, which Swift's Glibc module does not set. */
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

/// syncfs(2): writes back every dirty page and inode of the file system holding `fd`, with one
/// journal commit and one cache flush; 0, or -1 with errno (writeback errors included, Linux 5.8+).
static inline int jotter_syncfs(int fd) {
    return (int)syscall(SYS_syncfs, fd);
}

/// getrandom(2) with no flags: up to `length` bytes of the kernel's CSPRNG (blocking only before it is
/// first seeded, at boot); the count, or -1 with errno.
static inline long jotter_getrandom(void *buffer, unsigned long length) {
    return syscall(SYS_getrandom, buffer, length, 0);
}

/// No core file of this process: it holds memos in the clear while it works on them. RLIMIT_CORE 0, hard
/// and soft (also for what it starts), which a core_pattern file honours and systemd-coredump too ("resource
/// limits disable core dumping"). Not PR_SET_DUMPABLE: the same user may read the key file anyway, and it
/// would hide /proc/PID/fd from that user's own tools. 0, or -1 with errno.
static inline int jotter_forbid_core_dumps(void) {
    struct rlimit none = {0, 0};
    return setrlimit(RLIMIT_CORE, &none);
}

/// Names the calling thread (`top -H`, `perf`, /proc/PID/task/TID/comm); longer names are cut to 15 bytes.
static inline void jotter_name_thread(const char *name) {
    (void)prctl(PR_SET_NAME, name, 0, 0, 0);
}

/// A socket that becomes readable when an interface or one of its addresses comes, goes or changes
/// (rtnetlink's link, IPv4 and IPv6 address groups); non-blocking, close-on-exec. -1 with errno if the
/// kernel or a sandbox refuses it.
static inline int jotter_address_watch_open(void) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
    if (fd < 0) return -1;
    struct sockaddr_nl local;
    memset(&local, 0, sizeof local);
    local.nl_family = AF_NETLINK;
    local.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR;
    if (bind(fd, (struct sockaddr *)&local, sizeof local) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/// Reads and drops every notice waiting on `fd` (what changed is read afresh with getifaddrs); the
/// number read. A notice lost to a full socket buffer (ENOBUFS) counts as one: something changed.
static inline int jotter_address_watch_drain(int fd) {
    char buffer[8192];
    int count = 0;
    for (;;) {
        ssize_t got = recv(fd, buffer, sizeof buffer, 0);
        if (got > 0) { count++; continue; }
        if (got < 0 && errno == EINTR) continue;
        if (got < 0 && errno == ENOBUFS) { count++; continue; }
        return count;
    }
}

#endif
