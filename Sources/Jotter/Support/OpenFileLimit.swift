import Glibc

/// The process's open-file limit, fitted to the HTTP connection limit at start.
///
/// Every connection is a descriptor. A server that runs out of them can no longer accept the very
/// connection that would let it close an idle one: the connection registry's defence against a flood
/// of idle connections (close the longest-waiting, admit the newcomer) only works while it is the
/// connection limit, not the descriptor limit, that is reached first. Debian's default soft limit
/// (1024) is below the default connection limit plus what the rest of the process needs, so the soft
/// limit is raised toward the hard one; where the hard limit is too low, fewer connections are
/// admitted instead, and the start-up log says so.
public enum OpenFileLimit {
    /// What `fit` decided.
    struct Fitted: Sendable {
        /// Connections to admit: the configured limit, or fewer when the descriptors do not allow it.
        var connections: Int
        /// The soft limit now in force (the hard limit's value if it was raised that far).
        var softLimit: Int
        /// The hard limit.
        var hardLimit: Int
    }

    /// Descriptors kept for everything but connections: the database and its WAL, the log, the
    /// worker's deliveries (files, sockets, curl, PostgreSQL), libmicrohttpd's and Dispatch's own.
    /// Half of a very small limit.
    static func reserve(softLimit: Int) -> Int {
        min(reserved, softLimit / 2)
    }

    /// The reserve when the limit allows it.
    static let reserved = 256

    /// `RLIM_INFINITY` (all bits set on Linux; the C macro does not import).
    private static let unlimited = rlim_t.max

    /// Raises the soft limit so that `connections` fit beside the reserve, as far as the hard limit
    /// allows, and returns how many connections fit then.
    static func fit(connections: Int) -> Fitted {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else {
            return Fitted(connections: connections, softLimit: -1, hardLimit: -1)
        }
        let wanted = rlim_t(connections + reserved)
        if limit.rlim_cur != unlimited && limit.rlim_cur < wanted {
            var raised = limit
            raised.rlim_cur = limit.rlim_max == unlimited ? wanted : min(wanted, limit.rlim_max)
            if setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        let soft = limit.rlim_cur == unlimited ? Int.max / 2 : Int(clamping: limit.rlim_cur)
        let hard = limit.rlim_max == unlimited ? Int.max / 2 : Int(clamping: limit.rlim_max)
        return Fitted(connections: max(1, min(connections, soft - reserve(softLimit: soft))),
                      softLimit: soft, hardLimit: hard)
    }

    /// `configuration`'s connection limit fitted to the descriptors (see `fit`); a lowered limit is
    /// logged as a warning with the numbers that decided it.
    public static func fit(_ configuration: inout HTTPServer.Configuration, logger: Logger) {
        let fitted = fit(connections: configuration.connectionLimit)
        guard fitted.connections < configuration.connectionLimit else { return }
        logger.warning("the open-file limit admits fewer connections than configured; "
                       + "raise it (ulimit -n, LimitNOFILE=)",
                       metadata: ["connections": String(fitted.connections),
                                  "configured": String(configuration.connectionLimit),
                                  "open_files.soft": String(fitted.softLimit),
                                  "open_files.hard": String(fitted.hardLimit)])
        configuration.connectionLimit = fitted.connections
    }
}
