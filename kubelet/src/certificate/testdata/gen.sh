#!/usr/bin/env bash
# Regenerates the certificates the certificate readers' tests load (run once, output checked
# in; OpenSSL 3.0.19). Valid for 100 years so the tests never expire. `openssl x509 -req`
# without `-extfile` makes an X.509 v1 certificate (no extensions); with one, a v3.
#   ca-v1       a self-signed v1 CA (`x509 -req -signkey`, no extensions)
#   ca-v3       a self-signed v3 CA as kubeadm's is (`req -x509`: basicConstraints CA:TRUE)
#   client-v1   /O=system:masters/O=ops team/CN=alice, v1, RSA 2048, signed by ca-v3
#   client-v3   /O=system:nodes/CN=system:node:n1, v3 (clientAuth), signed by ca-v1
#   server-v1   CN=127.0.0.1, v1, P-256, signed by ca-v3
#   server-v3   IP SAN 127.0.0.1, v3 (serverAuth), P-256, signed by ca-v1
set -euo pipefail
cd "$(dirname "$0")"
days=36500
ec() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key"; }
ec ca-v1
openssl req -new -key ca-v1.key -subj "/CN=v1-ca" |
	openssl x509 -req -signkey ca-v1.key -days $days -out ca-v1.crt
ec ca-v3
openssl req -x509 -new -key ca-v3.key -subj "/CN=kubernetes" -days $days -out ca-v3.crt
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out client-v1.key
openssl req -new -key client-v1.key -subj "/O=system:masters/O=ops team/CN=alice" |
	openssl x509 -req -CA ca-v3.crt -CAkey ca-v3.key -CAcreateserial -days $days -out client-v1.crt
ec client-v3
openssl req -new -key client-v3.key -subj "/O=system:nodes/CN=system:node:n1" |
	openssl x509 -req -CA ca-v1.crt -CAkey ca-v1.key -CAcreateserial -days $days \
		-extfile <(printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n') -out client-v3.crt
ec server-v1
openssl req -new -key server-v1.key -subj "/CN=127.0.0.1" |
	openssl x509 -req -CA ca-v3.crt -CAkey ca-v3.key -CAcreateserial -days $days -out server-v1.crt
ec server-v3
openssl req -new -key server-v3.key -subj "/CN=apiserver" |
	openssl x509 -req -CA ca-v1.crt -CAkey ca-v1.key -CAcreateserial -days $days \
		-extfile <(printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n') -out server-v3.crt
rm -f ./*.srl
for c in *.crt; do printf '%s: ' "$c"; openssl x509 -in "$c" -noout -text | grep -m1 Version; done
