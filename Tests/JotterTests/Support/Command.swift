import Foundation

/// A program run to completion (the `openssl` and `curl` command-line tools, as independent judges
/// of what Jotter produced).
enum Command {
    struct Result {
        var status: Int32
        var output: String
        var errors: String
    }

    /// Runs `executable` with `arguments` in `directory`; returns its exit status and output.
    static func run(_ executable: String, _ arguments: [String], in directory: String? = nil) throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        let output = Pipe(), errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // Read both pipes to the end before waiting, so a chatty program never blocks on a full pipe.
        nonisolated(unsafe) var errorData = Data()
        let group = DispatchGroup()
        DispatchQueue.global().async(group: group) { errorData = errors.fileHandleForReading.readDataToEndOfFile() }
        let out = output.fileHandleForReading.readDataToEndOfFile()
        group.wait()
        process.waitUntilExit()
        return Result(status: process.terminationStatus, output: String(decoding: out, as: UTF8.self),
                      errors: String(decoding: errorData, as: UTF8.self))
    }

    /// `openssl ARGUMENTS` in `directory`.
    static func openssl(_ arguments: [String], in directory: String) throws -> Result {
        try run("/usr/bin/openssl", arguments, in: directory)
    }
}
