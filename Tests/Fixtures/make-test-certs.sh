#!/bin/sh
# Makes a throwaway certificate authority and a server certificate for 127.0.0.1 / localhost in DIR,
# for Jotter's TLS delivery tests: DIR/ca.pem, DIR/server.pem, DIR/server.key (valid for two days).
# Usage: make-test-certs.sh DIR [SUBJECT_ALT_NAMES]   (default "IP:127.0.0.1, DNS:localhost")
set -eu
dir=$1
names=${2:-IP:127.0.0.1, DNS:localhost}
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.pem \
    -days 2 -subj "/CN=Jotter throwaway test CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key -out server.csr \
    -subj "/CN=localhost"
cat > server.ext <<EXT
subjectAltName = $names
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
EXT
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 \
    -extfile server.ext
rm -f server.csr ca.srl
