import Dispatch
import Foundation
import Jotter

// The thin executable: read flags and environment into a Configuration, start, wait for a signal, stop.

/// After the start lines: flushes them (scripts wait for them), then runs until SIGINT or SIGTERM,
/// when `stop` drains and stops everything and the process exits 0.
func serveUntilSignalled(stop: @escaping () -> Void) -> Never {
    fflush(nil)  // all streams: scripts wait for this line
    signal(SIGPIPE, SIG_IGN)  // a peer that hangs up is an error to handle, not a reason to exit
    var sources: [any DispatchSourceSignal] = []
    for signalNumber in [SIGINT, SIGTERM] {
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

let environment = ProcessInfo.processInfo.environment
let command: CommandLineOptions.Command
do {
    command = try CommandLineOptions.parse(Array(CommandLine.arguments.dropFirst()), environment: environment,
                                           sourceRoot: #filePath)
} catch {
    FileHandle.standardError.write(Data("jotter: \(error)\nTry 'jotter --help'.\n".utf8))
    exit(2)
}

switch command {
case .help(let text):
    print(text)
case .send(let options):
    let result = SendCommand.run(options, readInput: {
        isatty(0) == 1 ? nil : FileHandle.standardInput.readDataToEndOfFile().map { $0 }
    })
    FileHandle.standardOutput.write(Data(result.output.utf8))
    FileHandle.standardError.write(Data(result.error.utf8))
    exit(result.status.rawValue)
case .history(let url, let token, let limit):
    let result = HistoryCommand.run(url: url, token: token, limit: limit)
    FileHandle.standardOutput.write(Data(result.output.utf8))
    FileHandle.standardError.write(Data(result.error.utf8))
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
        FileHandle.standardError.write(Data("jotter service: \(error)\n".utf8))
        exit(1)
    }
case .rekey(let dataDirectory):
    do {
        let report = try Rekey.run(dataDirectory: dataDirectory)
        let resumed = report.resumed ? " (finished an interrupted rekey)" : ""
        print("Re-sealed \(report.resealed) memos under a new key\(resumed).")
    } catch {
        FileHandle.standardError.write(Data("jotter rekey: \(error)\n".utf8))
        exit(1)
    }
case .pair(let dataDirectory):
    do {
        print(try PairCommand.run(dataDirectory: dataDirectory, credentialsDirectory: environment["CREDENTIALS_DIRECTORY"]))
    } catch {
        FileHandle.standardError.write(Data("jotter pair: \(error)\n".utf8))
        exit(1)
    }
case .devices(let dataDirectory, let action):
    do {
        print(try DevicesCommand.run(dataDirectory: dataDirectory, action: action,
                                     credentialsDirectory: environment["CREDENTIALS_DIRECTORY"]))
    } catch {
        FileHandle.standardError.write(Data("jotter devices: \(error)\n".utf8))
        exit(1)
    }
case .relayInvite(let dataDirectory):
    do {
        print(try RelayInviteCommand.run(dataDirectory: dataDirectory,
                                         credentialsDirectory: environment["CREDENTIALS_DIRECTORY"]))
    } catch {
        FileHandle.standardError.write(Data("jotter relay invite: \(error)\n".utf8))
        exit(1)
    }
case .relay(let configuration):
    let relay: RelayApplication
    do {
        relay = try RelayApplication(configuration: configuration,
                                     credentialsDirectory: environment["CREDENTIALS_DIRECTORY"])
        try relay.start()
    } catch {
        LogSink.standardError.flush()
        FileHandle.standardError.write(Data("jotter relay: cannot start: \(error)\n".utf8))
        exit(1)
    }
    let scheme = configuration.http.tls == nil ? "http" : "https"
    print("Listening on \(scheme)://\((configuration.http.host.contains(":") ? "[\(configuration.http.host)]" : configuration.http.host)):\(relay.port)")
    serveUntilSignalled { relay.stop() }
case .serve(let configuration):
    let application: Application
    do {
        application = try Application(configuration: configuration,
                                      credentialsDirectory: environment["CREDENTIALS_DIRECTORY"])
        try application.start()
    } catch {
        LogSink.standardError.flush()
        FileHandle.standardError.write(Data("jotter: cannot start: \(error)\n".utf8))
        exit(1)
    }
    for line in LANBanner.listeningLines(host: configuration.http.host, port: application.port,
                                         lan: application.lanInfo) {
        print(line)
    }
    print("Delivering to \(application.destination)")
    if let lan = application.lanInfo {
        print(LANBanner.text(lan))
    }
    serveUntilSignalled { application.stop() }
}
