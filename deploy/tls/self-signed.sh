#!/usr/bin/env bash
# TLS for rl-scheduler -> suggestion server without cert-manager: a private CA and a server
# certificate for the Service's DNS names, stored as the Secret the tls overlay mounts.
#
#   deploy/tls/self-signed.sh [--dir DIR] [--days N] [--san IP:127.0.0.1,DNS:localhost] [--apply]
#
# --apply creates (or replaces) Secret rlscore-suggestion-server-tls in rlscore-system with kubectl
# (KUBECTL, default kubectl). Re-run before --days runs out; the server picks up the new files
# without a restart. Keep ca.key offline: whoever holds it can impersonate the server.
set -euo pipefail
DIR=$(mktemp -d); DAYS=365; APPLY=0; EXTRA_SAN=""
while [ $# -gt 0 ]; do
  case $1 in
    --dir) DIR=$2; shift 2 ;;
    --days) DAYS=$2; shift 2 ;;
    --san) EXTRA_SAN=", $2"; shift 2 ;;
    --apply) APPLY=1; shift ;;
    *) echo "usage: $0 [--dir DIR] [--days N] [--san SAN,...] [--apply]" >&2; exit 2 ;;
  esac
done
mkdir -p "$DIR"
SERVICE=rlscore-suggestion-server NAMESPACE=rlscore-system
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$DAYS" \
  -subj "/CN=rlscore CA" -keyout "$DIR/ca.key" -out "$DIR/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$SERVICE" \
  -keyout "$DIR/tls.key" -out "$DIR/tls.csr" 2>/dev/null
cat >"$DIR/ext.cnf" <<EXT
subjectAltName = DNS:$SERVICE, DNS:$SERVICE.$NAMESPACE, DNS:$SERVICE.$NAMESPACE.svc, DNS:$SERVICE.$NAMESPACE.svc.cluster.local$EXTRA_SAN
extendedKeyUsage = serverAuth
EXT
openssl x509 -req -in "$DIR/tls.csr" -CA "$DIR/ca.crt" -CAkey "$DIR/ca.key" -CAcreateserial -days "$DAYS" \
  -extfile "$DIR/ext.cnf" -out "$DIR/tls.crt" 2>/dev/null
rm -f "$DIR/tls.csr" "$DIR/ext.cnf" "$DIR/ca.srl"
chmod 600 "$DIR"/*.key
echo "wrote $DIR/ca.crt, $DIR/tls.crt, $DIR/tls.key (and $DIR/ca.key: keep it offline)" >&2
if [ "$APPLY" = 1 ]; then
  "${KUBECTL:-kubectl}" -n "$NAMESPACE" create secret generic "$SERVICE-tls" --from-file="$DIR/tls.crt" \
    --from-file="$DIR/tls.key" --from-file="$DIR/ca.crt" --dry-run=client -o yaml | "${KUBECTL:-kubectl}" apply -f -
fi
