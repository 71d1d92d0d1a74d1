import CSQLite
import Glibc
import Synchronization

/// The SQLite VFS every Jotter database is opened with: SQLite's own `unix` VFS, except that the WAL
/// frames of a durable commit reach the kernel in one `pwrite` instead of two per page.
///
/// SQLite writes each WAL frame as a 24-byte header and a page, each its own `pwrite`; a memo's commit
/// is 3 or 4 frames. While the writer runs a durable transaction (`Database.gatheringWALWrites`),
/// consecutive writes to the WAL are copied into one buffer, which goes to the file before anything
/// else touches it: the `fsync` of the commit (always next in a durable commit, before SQLite publishes
/// the frames to other connections), a read, a size query, a truncation, a write elsewhere, the file's
/// close, or the end of the transaction. What is on disk when the commit returns is exactly what it
/// would have been. A commit that does not sync publishes its frames at once, so its writes go through
/// as they come. (Measured with one client posting: 5 system calls and about 5.5 µs of CPU less per
/// memo; see bench/README.md.)
///
/// Each open file is laid out as `[sqlite3_file (our methods)] [FileState] [the unix file]`.
enum CoalescingVFS {
    /// The name to open a database with.
    static let name = "jotter"

    /// Registers the VFS (once). False when this SQLite has no `unix` VFS (then open with the default).
    static let isAvailable: Bool = register()

    /// The most bytes gathered before they are written anyway (a transaction of many pages). SQLite's own
    /// unix write never takes more than 128 KiB at once (it masks the length with 0x1ffff).
    private static let bufferLimit = 64 * 1024

    /// Coming syncs of a WAL that write what was gathered and then fail with `SQLITE_IOERR_FSYNC`, as on a
    /// disk whose fsync fails: the commit's frames are whole in the file, yet SQLite reports its COMMIT as
    /// failed. By file (its address), so that one test's database fails and no other. Set only by tests
    /// (`failSyncs`); otherwise a sync costs one atomic load more.
    private static let syncFaults = Mutex<[UInt: Int]>([:])
    private static let anySyncFaults = Atomic<Bool>(false)

    /// Makes the next `count` syncs of `file` (a connection's WAL) fail after writing what was gathered.
    static func failSyncs(_ count: Int, of file: UnsafeMutablePointer<sqlite3_file>?) {
        guard let file else { return }
        syncFaults.withLock { faults in
            faults[UInt(bitPattern: file)] = count > 0 ? count : nil
            anySyncFaults.store(!faults.isEmpty, ordering: .relaxed)
        }
    }

    /// Takes one of the failures set for `file`, if any is left (or, with `all`, forgets them: a closed file).
    private static func takeSyncFault(_ file: UnsafeMutablePointer<sqlite3_file>, all: Bool = false) -> Bool {
        guard anySyncFaults.load(ordering: .relaxed) else { return false }
        return syncFaults.withLock { faults in
            let key = UInt(bitPattern: file)
            guard let left = faults[key] else { return false }
            faults[key] = left > 1 && !all ? left - 1 : nil
            anySyncFaults.store(!faults.isEmpty, ordering: .relaxed)
            return true
        }
    }

    /// What the VFS keeps for one open file, in the memory SQLite allocated for it.
    private struct FileState {
        var isWAL: Bool
        /// True inside a durable transaction of the writer (WAL files only).
        var gathering = false
        /// The file offset of the first gathered byte, how many are gathered, and the buffer's size.
        var start: Int64 = 0
        var count = 0
        var capacity = 0
        var bytes: UnsafeMutableRawPointer?
        /// Writes SQLite asked for, and writes made to the file (for tests and benches).
        var requested = 0
        var issued = 0
    }

    private static let stateOffset = MemoryLayout<sqlite3_file>.stride
    private static let fileOffset = (stateOffset + MemoryLayout<FileState>.stride + 15) & ~15

    private static func state(_ file: UnsafeMutablePointer<sqlite3_file>) -> UnsafeMutablePointer<FileState> {
        (UnsafeMutableRawPointer(file) + stateOffset).assumingMemoryBound(to: FileState.self)
    }

    private static func underlying(_ file: UnsafeMutablePointer<sqlite3_file>) -> UnsafeMutablePointer<sqlite3_file> {
        (UnsafeMutableRawPointer(file) + fileOffset).assumingMemoryBound(to: sqlite3_file.self)
    }

    /// The methods of the file under ours (set whenever ours are).
    private static func innerMethods(_ file: UnsafeMutablePointer<sqlite3_file>) -> sqlite3_io_methods? {
        underlying(file).pointee.pMethods?.pointee
    }

    private static func baseVFS(_ vfs: UnsafeMutablePointer<sqlite3_vfs>?) -> UnsafeMutablePointer<sqlite3_vfs>? {
        vfs?.pointee.pAppData?.assumingMemoryBound(to: sqlite3_vfs.self)
    }

    // MARK: Gathering

    /// Starts or ends gathering on `file` (a connection's WAL, from `SQLITE_FCNTL_JOURNAL_POINTER`); does
    /// nothing to a file that is not one of ours or not a WAL. Ending writes what was gathered.
    static func setGathering(_ on: Bool, file: UnsafeMutablePointer<sqlite3_file>?) -> Int32 {
        guard let file, file.pointee.pMethods == ioMethods, state(file).pointee.isWAL else { return SQLITE_OK }
        let code = on ? SQLITE_OK : flush(file)
        state(file).pointee.gathering = on
        return code
    }

    /// Writes SQLite asked of `file`, and writes that reached it (nil for a file that is not ours).
    static func writeCounts(file: UnsafeMutablePointer<sqlite3_file>?) -> (requested: Int, issued: Int)? {
        guard let file, file.pointee.pMethods == ioMethods else { return nil }
        return (state(file).pointee.requested, state(file).pointee.issued)
    }

    private static func flush(_ file: UnsafeMutablePointer<sqlite3_file>) -> Int32 {
        let state = state(file)
        guard state.pointee.count > 0, let bytes = state.pointee.bytes else { return SQLITE_OK }
        let count = state.pointee.count
        state.pointee.count = 0
        state.pointee.issued += 1
        guard let write = innerMethods(file)?.xWrite else { return SQLITE_IOERR }
        return write(underlying(file), bytes, Int32(count), state.pointee.start)
    }

    private static func write(_ file: UnsafeMutablePointer<sqlite3_file>, _ data: UnsafeRawPointer?,
                              _ amount: Int32, _ offset: Int64) -> Int32 {
        let state = state(file)
        state.pointee.requested += 1
        guard state.pointee.gathering, let data, amount > 0 else { return writeThrough(file, data, amount, offset) }
        if state.pointee.count > 0 && offset != state.pointee.start + Int64(state.pointee.count) {
            let code = flush(file)
            guard code == SQLITE_OK else { return code }
        }
        if state.pointee.count + Int(amount) > bufferLimit {
            let code = flush(file)
            guard code == SQLITE_OK else { return code }
            if Int(amount) > bufferLimit { return writeThrough(file, data, amount, offset) }
        }
        let needed = state.pointee.count + Int(amount)
        if needed > state.pointee.capacity {
            let capacity = max(needed, state.pointee.capacity * 2, 64 * 1024)
            guard let grown = realloc(state.pointee.bytes, capacity) else {
                let code = flush(file)
                return code == SQLITE_OK ? writeThrough(file, data, amount, offset) : code
            }
            state.pointee.bytes = grown
            state.pointee.capacity = capacity
        }
        guard let bytes = state.pointee.bytes else { return writeThrough(file, data, amount, offset) }
        if state.pointee.count == 0 { state.pointee.start = offset }
        (bytes + state.pointee.count).copyMemory(from: data, byteCount: Int(amount))
        state.pointee.count += Int(amount)
        return SQLITE_OK
    }

    private static func writeThrough(_ file: UnsafeMutablePointer<sqlite3_file>, _ data: UnsafeRawPointer?,
                                     _ amount: Int32, _ offset: Int64) -> Int32 {
        state(file).pointee.issued += 1
        guard let write = innerMethods(file)?.xWrite else { return SQLITE_IOERR }
        return write(underlying(file), data, amount, offset)
    }

    /// Writes what is gathered, then runs `body` (for every method that must see the file as SQLite wrote it).
    private static func flushed(_ file: UnsafeMutablePointer<sqlite3_file>?,
                                _ body: (UnsafeMutablePointer<sqlite3_file>, sqlite3_io_methods) -> Int32) -> Int32 {
        guard let file, let methods = innerMethods(file) else { return SQLITE_MISUSE }
        let code = flush(file)
        guard code == SQLITE_OK else { return code }
        return body(underlying(file), methods)
    }

    /// Runs `body` on the file underneath (methods that gathered bytes do not concern).
    private static func passed(_ file: UnsafeMutablePointer<sqlite3_file>?,
                               _ body: (UnsafeMutablePointer<sqlite3_file>, sqlite3_io_methods) -> Int32) -> Int32 {
        guard let file, let methods = innerMethods(file) else { return SQLITE_MISUSE }
        return body(underlying(file), methods)
    }

    // MARK: Methods

    /// Our file methods: each passes to the `unix` file underneath, writing gathered bytes first where
    /// the file must be as SQLite wrote it. Never freed (the VFS lives as long as the process).
    nonisolated(unsafe) private static let ioMethods: UnsafeMutablePointer<sqlite3_io_methods> = {
        let table = UnsafeMutablePointer<sqlite3_io_methods>.allocate(capacity: 1)
        table.initialize(to: sqlite3_io_methods(
            iVersion: 3,
            xClose: { file in
                guard let file else { return SQLITE_MISUSE }
                _ = takeSyncFault(file, all: true)
                let flushCode = flush(file)
                let code = innerMethods(file)?.xClose?(underlying(file)) ?? SQLITE_OK
                free(state(file).pointee.bytes)
                state(file).pointee = FileState(isWAL: false)
                return flushCode == SQLITE_OK ? code : flushCode
            },
            xRead: { file, buffer, amount, offset in
                flushed(file) { $1.xRead?($0, buffer, amount, offset) ?? SQLITE_IOERR }
            },
            xWrite: { file, data, amount, offset in
                guard let file else { return SQLITE_MISUSE }
                return write(file, data, amount, offset)
            },
            xTruncate: { file, size in
                flushed(file) { $1.xTruncate?($0, size) ?? SQLITE_IOERR }
            },
            xSync: { file, flags in
                if let file, takeSyncFault(file) {
                    let code = flush(file)
                    return code == SQLITE_OK ? SQLITE_IOERR | (4 << 8) : code  // SQLITE_IOERR_FSYNC
                }
                return flushed(file) { $1.xSync?($0, flags) ?? SQLITE_IOERR }
            },
            xFileSize: { file, size in
                flushed(file) { $1.xFileSize?($0, size) ?? SQLITE_IOERR }
            },
            xLock: { file, lock in
                passed(file) { $1.xLock?($0, lock) ?? SQLITE_IOERR }
            },
            xUnlock: { file, lock in
                passed(file) { $1.xUnlock?($0, lock) ?? SQLITE_IOERR }
            },
            xCheckReservedLock: { file, result in
                passed(file) { $1.xCheckReservedLock?($0, result) ?? SQLITE_IOERR }
            },
            xFileControl: { file, operation, argument in
                passed(file) { $1.xFileControl?($0, operation, argument) ?? SQLITE_NOTFOUND }
            },
            xSectorSize: { file in
                passed(file) { $1.xSectorSize?($0) ?? 4096 }
            },
            xDeviceCharacteristics: { file in
                passed(file) { $1.xDeviceCharacteristics?($0) ?? 0 }
            },
            xShmMap: { file, region, size, extend, pointer in
                passed(file) { $1.xShmMap?($0, region, size, extend, pointer) ?? SQLITE_IOERR }
            },
            xShmLock: { file, offset, count, flags in
                passed(file) { $1.xShmLock?($0, offset, count, flags) ?? SQLITE_IOERR }
            },
            xShmBarrier: { file in
                _ = passed(file) { file, methods in
                    methods.xShmBarrier?(file)
                    return SQLITE_OK
                }
            },
            xShmUnmap: { file, delete in
                passed(file) { $1.xShmUnmap?($0, delete) ?? SQLITE_OK }
            },
            xFetch: { file, offset, amount, pointer in
                // Mapped reads see the file, so gathered bytes go first (SQLite maps only the database file).
                flushed(file) { file, methods in
                    guard let fetch = methods.xFetch else {
                        pointer?.pointee = nil
                        return SQLITE_OK
                    }
                    return fetch(file, offset, amount, pointer)
                }
            },
            xUnfetch: { file, offset, pointer in
                passed(file) { $1.xUnfetch?($0, offset, pointer) ?? SQLITE_OK }
            }))
        return table
    }()

    private static func register() -> Bool {
        SQLiteLibrary.configured
        guard let unix = sqlite3_vfs_find("unix") else { return false }
        let vfs = UnsafeMutablePointer<sqlite3_vfs>.allocate(capacity: 1)
        var copy = unix.pointee
        copy.szOsFile = Int32(fileOffset) + unix.pointee.szOsFile
        copy.pNext = nil
        copy.zName = UnsafePointer(strdup(name))
        copy.pAppData = UnsafeMutableRawPointer(unix)
        copy.xOpen = { vfs, path, file, flags, outFlags in
            guard let base = CoalescingVFS.baseVFS(vfs), let file, let open = base.pointee.xOpen else {
                return SQLITE_MISUSE
            }
            CoalescingVFS.state(file).initialize(to: FileState(isWAL: flags & SQLITE_OPEN_WAL != 0))
            let inner = CoalescingVFS.underlying(file)
            inner.pointee.pMethods = nil
            let code = open(base, path, inner, flags, outFlags)
            // SQLite calls xClose when pMethods is set, even after a failed open.
            file.pointee.pMethods = inner.pointee.pMethods == nil ? nil : UnsafePointer(CoalescingVFS.ioMethods)
            return code
        }
        copy.xDelete = { vfs, path, syncDirectory in
            guard let base = CoalescingVFS.baseVFS(vfs), let delete = base.pointee.xDelete else { return SQLITE_MISUSE }
            return delete(base, path, syncDirectory)
        }
        copy.xAccess = { vfs, path, flags, result in
            guard let base = CoalescingVFS.baseVFS(vfs), let access = base.pointee.xAccess else { return SQLITE_MISUSE }
            return access(base, path, flags, result)
        }
        copy.xFullPathname = { vfs, path, size, output in
            guard let base = CoalescingVFS.baseVFS(vfs), let fullPathname = base.pointee.xFullPathname else {
                return SQLITE_MISUSE
            }
            return fullPathname(base, path, size, output)
        }
        // The rest (randomness, time, sleep, dlopen, system calls) never look at the VFS they are given.
        vfs.initialize(to: copy)
        return sqlite3_vfs_register(vfs, 0) == SQLITE_OK
    }
}
