#ifndef JOTTER_CSYSTEM_SHIM_H
#define JOTTER_CSYSTEM_SHIM_H

/* Linux calls that glibc declares only under _GNU_SOURCE, which Swift's Glibc module does not set. */
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

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

/// Names the calling thread (`top -H`, `perf`, /proc/PID/task/TID/comm); longer names are cut to 15 bytes.
static inline void jotter_name_thread(const char *name) {
    (void)prctl(PR_SET_NAME, name, 0, 0, 0);
}

#endif
