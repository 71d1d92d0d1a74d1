import Dispatch
import Glibc
import Jotter

// The thin executable: read flags and environment into a Configuration, start, wait for a signal, stop.

/// Writes all of `text` to `fd` (1 or 2) at once, unbuffered.
func write(_ text: String, to fd: Int32) {
    var bytes = Array(text.utf8)[...]
    while !bytes.isEmpty {
        let count = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        if count < 0 && errno == EINTR { continue }
        guard count > 0 else { return }
        bytes = bytes.dropFirst(count)
    }
}

/// Standard input up to its end, or up to one byte past `limit` (a runaway pipe, `yes | jotter send`, is
/// not read into memory until the machine runs out of it); nil if it cannot be read.
func readStandardInput(limit: Int) -> [UInt8]? {
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while bytes.count <= limit {
        let count = buffer.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
        if count < 0 && errno == EINTR { continue }
        guard count >= 0 else { return nil }
        if count == 0 { return bytes }
        bytes += buffer[..<count]
    }
    return bytes
}

/// After the start lines: flushes them (scripts wait for them), then runs until SIGINT or SIGTERM,
/// when `stop` drains and stops everything and the process exits 0.
func serveUntilSignalled(stop: @escaping () -> Void) -> Never {
    fflush(nil)  // all streams: scripts wait for this line
    var sources: [any DispatchSourceSignal] = []
    // SIGHUP: the terminal it ran in was closed. Stopped as on SIGTERM: its default ended the process on
    // the spot, mid-send (an SMTP memo whose reply was on its way then went again at the next start).
    for signalNumber in [SIGINT, SIGTERM, SIGHUP] {
        signal(signalNumber, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .main)
        source.setEventHandler {
            stop()
            LogSink.standardError.flush()
            exit(0)
        }
        source.resume()
        sources.append(source)
    }
    withExtendedLifetime(sources) { dispatchMain() }
}

// A file-size limit (`ulimit -f`) is a full disk for the file it stops: the write fails (EFBIG) and the
// store answers that it could not store, where SIGXFSZ's default would end the process, accepted memos
// and all. Child processes start with every signal at its default again (ChildProcess).
signal(SIGXFSZ, SIG_IGN)
// A reader that hangs up (`jotter send x | true`, a closed client socket) is an error to handle, not a
// reason to exit: killed by SIGPIPE after the server stored the memo, `jotter send` exited 141, and a
// script retrying on failure sent the memo again under a new key.
signal(SIGPIPE, SIG_IGN)

// Arguments reach Swift repaired, each invalid UTF-8 sequence made U+FFFD: a memo's text (`jotter send`)
// would change without a word, where the same bytes from a file or stdin are refused, and a path would
// name another file. Refused alike, before anything else.
for index in 1..<Int(CommandLine.argc) {
    guard let argument = CommandLine.unsafeArgv[index] else { continue }
    let bytes = UnsafeRawBufferPointer(start: argument, count: strlen(argument)).bindMemory(to: UInt8.self)
    if String(validating: bytes, as: UTF8.self) == nil {
        write("jotter: argument \(index) is not UTF-8 text\n", to: 2)
        exit(64)
    }
}

let environment = ProcessEnvironment.current
let command: CommandLineOptions.Command
do {
    command = try CommandLineOptions.parse(Array(CommandLine.arguments.dropFirst()), environment: environment,
                                           sourceRoot: #filePath)
} catch {
    let text = "\(error)"
    // The help of the command given, where it has its own (`jotter relay --help` lists the relay's options).
    let words = CommandLine.arguments.dropFirst().filter { !$0.hasPrefix("-") }
    let help = words.first.flatMap { word in
        ["relay", "serve"].contains(word) ? word : nil
    }.map { "jotter \($0) --help" } ?? "jotter --help"
    write((text.hasPrefix("jotter ") ? text : "jotter: " + text) + "\nTry '\(help)'.\n", to: 2)
    exit(64)  // EX_USAGE, as README says for jotter send
}

switch command {
case .help(let text):
    print(text)
case .send(let options):
    let result = SendCommand.run(options, readInput: {
        isatty(0) == 1 ? nil : readStandardInput(limit: SendCommand.maxInputBytes)
    })
    write(result.output, to: 1)
    write(result.error, to: 2)
    exit(result.status.rawValue)
case .history(let url, let token, let limit, let caFile):
    let result = HistoryCommand.run(url: url, token: token, limit: limit, caFile: caFile)
    write(result.output, to: 1)
    write(result.error, to: 2)
    exit(result.status.rawValue)
case .service(let action, let configuration):
    var path = [CChar](repeating: 0, count: 4096)
    let length = readlink("/proc/self/exe", &path, path.count - 1)
    let binary = length > 0 ? String(decoding: path.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        : CommandLine.arguments[0]
    do {
        print(try ServiceCommand.run(action, binary: binary, configuration: configuration, environment: environment,
                                     systemctl: ServiceCommand.systemctl))
    } catch {
        write("jotter service: \(error)\n", to: 2)
        exit(1)
    }
case .rekey(let dataDirectory):
    ProcessHardening.forbidCoreDumps()  // every memo passes through it in the clear
    do {
        let report = try Rekey.run(dataDirectory: dataDirectory, credentialsDirectory: environment["CREDENTIALS_DIRECTORY"])
        let resumed = report.resumed ? " (finished an interrupted rekey)" : ""
        print("Re-sealed \(report.resealed) memos under a new key\(resumed).")
    } catch {
        write("jotter rekey: \(error)\n", to: 2)
        exit(1)
    }
case .pair(let dataDirectory):
    do {
        print(try PairCommand.run(dataDirectory: dataDirectory, credentialsDirectory: environment["CREDENTIALS_DIRECTORY"]))
    } catch {
        write("jotter pair: \(error)\n", to: 2)
        exit(1)
    }
case .devices(let dataDirectory, let action):
    do {
        print(try DevicesCommand.run(dataDirectory: dataDirectory, action: action,
                                     credentialsDirectory: environment["CREDENTIALS_DIRECTORY"]))
    } catch {
        write("jotter devices: \(error)\n", to: 2)
        exit(1)
    }
case .relayInvite(let dataDirectory, let store):
    do {
        print(try RelayInviteCommand.run(dataDirectory: dataDirectory, store: store,
                                         credentialsDirectory: environment["CREDENTIALS_DIRECTORY"]))
    } catch {
        write("jotter relay invite: \(error)\n", to: 2)
        exit(1)
    }
case .relay(var configuration):
    ProcessHardening.forbidCoreDumps()  // it holds messages in the clear while it mails them
    OpenFileLimit.fit(&configuration.http, logger: Logger(label: "jotter", level: configuration.logLevel))
    let relay: RelayApplication
    do {
        relay = try RelayApplication(configuration: configuration,
                                     credentialsDirectory: environment["CREDENTIALS_DIRECTORY"])
        try relay.start()
    } catch {
        LogSink.standardError.flush()
        write("jotter relay: cannot start: \(error)\n", to: 2)
        exit(1)
    }
    let scheme = configuration.http.tls == nil ? "http" : "https"
    print("Listening on \(scheme)://\((configuration.http.host.contains(":") ? "[\(configuration.http.host)]" : configuration.http.host)):\(relay.port)")
    serveUntilSignalled { relay.stop() }
case .serve(var configuration):
    ProcessHardening.forbidCoreDumps()  // it holds memos in the clear while it seals and delivers them
    OpenFileLimit.fit(&configuration.http, logger: Logger(label: "jotter", level: configuration.logLevel))
    let application: Application
    do {
        application = try Application(configuration: configuration,
                                      credentialsDirectory: environment["CREDENTIALS_DIRECTORY"])
        try application.start()
    } catch {
        LogSink.standardError.flush()
        write("jotter: cannot start: \(error)\n", to: 2)
        exit(1)
    }
    for line in LANBanner.listeningLines(host: configuration.http.host, port: application.port,
                                         lan: application.lanInfo) {
        print(line)
    }
    // Addresses, the user name and the live pairing link only for a person at a terminal: a journal, a
    // log file or `docker logs` keeps what a terminal forgets, for anyone who reads it later (`jotter pair`
    // makes a link on demand).
    let terminal = isatty(1) == 1 && !ProcessEnvironment.writesToJournal(descriptor: 1, environment: environment)
    print("Delivering to " + (terminal ? application.destination : RelayURL.withoutPeople(application.destination)))
    if let lan = application.lanInfo {
        print(LANBanner.text(lan, host: configuration.http.host, showsPairing: terminal))
        application.setOnLANChange { lan in
            print(LANBanner.changedText(lan))
            fflush(nil)
        }
    }
    serveUntilSignalled { application.stop() }
}
