// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Jotter",
    products: [
        .executable(name: "jotter", targets: ["JotterCLI"]),
        .library(name: "Jotter", targets: ["Jotter"]),
    ],
    targets: [
        .systemLibrary(
            name: "CMicroHTTPD",
            pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"])]
        ),
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        .systemLibrary(
            name: "CCrypto",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        // libcurl and libpq are opened at their first use, not linked (SharedLibrary.swift): only their
        // headers are needed to build (Debian's libcurl4-openssl-dev and libpq-dev, which `make` installs).
        .systemLibrary(name: "CCurl"),
        .systemLibrary(
            name: "CQRencode",
            pkgConfig: "libqrencode",
            providers: [.apt(["libqrencode-dev"])]
        ),
        .systemLibrary(name: "CLibPQ"),
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        .systemLibrary(name: "CSystem"),
        .target(
            name: "Jotter",
            dependencies: ["CMicroHTTPD", "CSQLite", "CCrypto", "CCurl", "CQRencode", "CZlib", "CLibPQ", "CSystem"]
        ),
        .executableTarget(
            name: "JotterCLI",
            dependencies: ["Jotter"],
            // Release builds carry the Swift runtime and standard library inside the binary: it runs where
            // Swift is not installed, and maps only the parts it uses (idle RSS about 2 MiB lower; see
            // bench/README.md). Debug builds, which the tests run, stay dynamic.
            linkerSettings: [.unsafeFlags(["-static-stdlib"], .when(configuration: .release))]
        ),
        .testTarget(
            name: "JotterTests",
            dependencies: ["Jotter"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
