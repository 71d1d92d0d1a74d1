#ifndef JOTTER_CSQLITE_SHIM_H
#define JOTTER_CSQLITE_SHIM_H

#include <sqlite3.h>

/// SQLITE_TRANSIENT is a cast macro Swift cannot import: SQLite copies the bound bytes at once.
static inline sqlite3_destructor_type jotter_sqlite_transient(void) {
    return SQLITE_TRANSIENT;
}

/// Turns off SQLite's memory statistics (sqlite3_memory_used and its kin, which Jotter never reads). With
/// them on, every allocation and free SQLite makes takes one process-wide mutex to count it. Only takes
/// effect before SQLite initializes; returns SQLITE_MISUSE after that (and nothing changes).
static inline int jotter_sqlite_disable_memory_statistics(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

#endif
