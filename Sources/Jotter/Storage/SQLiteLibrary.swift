import CSQLite

/// Process-wide settings of the SQLite library, made once before anything initializes it (opening a
/// connection or registering a VFS does).
enum SQLiteLibrary {
    /// Evaluated (once, thread-safely) by everything that is about to touch SQLite first.
    static let configured: Void = {
        // Jotter never reads SQLite's memory statistics; counting them costs every allocation and free a
        // process-wide mutex, from every thread that uses SQLite.
        _ = jotter_sqlite_disable_memory_statistics()
    }()
}
