#ifndef JOTTER_CSYSTEM_SHIM_H
#define JOTTER_CSYSTEM_SHIM_H

/* Linux calls that glibc declares only under _GNU_SOURCE, which Swift's Glibc module does not set. */
#include <unistd.h>
#include <sys/syscall.h>

/// syncfs(2): writes back every dirty page and inode of the file system holding `fd`, with one
/// journal commit and one cache flush; 0, or -1 with errno (writeback errors included, Linux 5.8+).
static inline int jotter_syncfs(int fd) {
    return (int)syscall(SYS_syncfs, fd);
}

#endif
