# Jotter: `make run` serves on http://127.0.0.1:7373, `make test` runs every test.
# Both install the Debian packages they need first (as root, or through sudo).

SWIFT ?= swift
# Empty: the server's own defaults (127.0.0.1, or every interface with --lan; port 7373), and
# JOTTER_HOST/JOTTER_PORT, decide. Set, they are passed as --host/--port.
PORT ?=
HOST ?=
ARGS ?=

# What building and running needs.
RUN_PACKAGES = pkg-config libmicrohttpd-dev libsqlite3-dev libssl-dev libcurl4-openssl-dev libqrencode-dev zlib1g-dev libpq-dev
# What the tests need besides: Debian's Python (an independent reader of delivered mail),
# a real SMTP server, a browser, a QR decoder (zbar) and an SVG renderer (librsvg) to read the pairing code,
# notmuch (GMime) as a second reader of encoded subjects, and a Japanese font so the page's
# screenshots (.build/artifacts/phone) show Japanese, not boxes. The other engines' smoke tests: Firefox ESR
# (Marionette), WebKitGTK's WebKitWebDriver (it brings MiniBrowser) and a private X server for it;
# systemd for systemd-analyze (the service unit is verified, not run); PostgreSQL for the relay's shared
# store (each test starts a throwaway cluster with initdb).
TEST_PACKAGES = python3 python3-aiosmtpd python3-yaml chromium openssl curl esbuild zbar-tools librsvg2-bin notmuch fonts-ipafont-gothic firefox-esr webkit2gtk-driver xvfb xauth systemd postgresql iproute2 cmark
# The benchmarks compare against nginx and drive load with wrk; bench/relay also needs PostgreSQL (postgres-deps).
BENCH_PACKAGES = nginx-light wrk python3 python3-aiosmtpd chromium strace



.PHONY: run build test deps test-deps postgres-deps clean bench fuzz interop

run: build
	.build/release/jotter serve $(if $(HOST),--host $(HOST)) $(if $(PORT),--port $(PORT)) $(ARGS)

build: deps
	$(SWIFT) build -c release --product jotter

# The fuzz check first, so the test runner's summary is the last thing printed.
test: deps test-deps
	python3 Public/src/build.py --check
	Fuzz/run --check
	$(SWIFT) test

fuzz: deps
	Fuzz/run all $(or $(SECONDS),60)

bench: deps postgres-deps
	@bin/install-packages $(BENCH_PACKAGES)
	bench/http
	bench/delivery --no-build
	bench/page --no-build
	bench/syncs --no-build
	bench/history --no-build
	bench/hostile --no-build
	bench/relay --no-build

# Jotter against Debian's Postfix (submission, smtps, sendmail) and Dovecot (IMAP), read back with notmuch
# too, all on 127.0.0.1; not part of `make test`. As root: it configures Postfix for the run (restored
# after), starts both and adds a throwaway user. Postfix is preseeded "Local only" so installing it
# configures nothing that listens beyond loopback.
INTEROP_PACKAGES = postfix dovecot-imapd notmuch openssl curl python3 iproute2

interop: build
	@sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	echo 'postfix postfix/main_mailer_type select Local only' | $$sudo debconf-set-selections
	@bin/install-packages $(INTEROP_PACKAGES)
	@sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; $$sudo interop/run --no-build

deps:
	@bin/install-packages $(RUN_PACKAGES)

test-deps: postgres-deps
	@bin/install-packages $(TEST_PACKAGES)

# PostgreSQL's package would create and start a "main" cluster on port 5432; the tests and bench/relay need
# only its programs (each starts its own throwaway cluster), so that is switched off before it is installed.
postgres-deps:
	@sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; [ -d /usr/lib/postgresql ] || { $$sudo mkdir -p \
	    /etc/postgresql-common/createcluster.d && echo 'create_main_cluster = false' | \
	    $$sudo tee /etc/postgresql-common/createcluster.d/jotter-tests.conf >/dev/null; }
	@bin/install-packages postgresql

clean:
	rm -rf .build
