#!/usr/bin/env bash
# The local cluster: real etcd, kube-apiserver, kube-controller-manager and our kube-scheduler
# (all from ./bin), KWOK's fake nodes, Prometheus, and the suggestion server. No Docker.
#
#   cluster.sh up | down | status | nodes | server-start | server-stop | env
#
# Environment: NODES (default 4), NODE_CPUS (cpus per node, cycled; default 8,16,4), CLUSTER_NAME
# (default rlscore), KWOK_WORKDIR (default ./.local-cluster). Everything the cluster writes (configs, logs, pids) stays under KWOK_WORKDIR.
# CONTAINERS=1 runs the suggestion server and kube-scheduler from the images `make images` built
# (REGISTRY, default rlscore) with podman, on the host's network, instead of as host processes.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NAME=${CLUSTER_NAME:-rlscore}
NODES=${NODES:-4}
export KWOK_WORKDIR=${KWOK_WORKDIR:-$ROOT/.local-cluster}
BIN=$ROOT/bin
PY=$ROOT/.venv/bin/python
KWOKCTL=$BIN/kwokctl
OURS=$KWOK_WORKDIR/rlscore-$NAME          # our files: rendered configs, ports, server log and pid
CLUSTER_DIR=$KWOK_WORKDIR/clusters/$NAME  # kwokctl's files: component logs, pids, kubeconfig
KUBECONFIG_FILE=$OURS/kubeconfig.yaml
CONTAINERS=${CONTAINERS:-0}
REGISTRY=${REGISTRY:-rlscore}
SERVER_IMAGE=$REGISTRY/suggestion-server:0.1.0
SCHEDULER_IMAGE=$REGISTRY/kube-scheduler:v1.35.4-rlscore.0
export CONTAINERS_CONF=${CONTAINERS_CONF:-$ROOT/deploy/images/containers.conf}
PODMAN=(podman --storage-driver vfs --runtime runc --cgroup-manager cgroupfs)

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

require_binaries() {
  local missing=()
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kwok kwokctl kubectl; do
    [ -x "$BIN/$b" ] || missing+=("$b")
  done
  [ ${#missing[@]} -eq 0 ] || die "missing in $BIN: ${missing[*]} (run: make local-bin)"
  command -v prometheus >/dev/null || die "prometheus not found (run: make deps)"
  [ -x "$PY" ] || die "no $PY (run: make install)"
}

kubectl_() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

exists() { [ -f "$OURS/ports.env" ] && [ -d "$CLUSTER_DIR" ]; }

running() {
  exists || return 1
  # shellcheck disable=SC1091
  . "$OURS/ports.env"
  kubectl_ get --raw /readyz >/dev/null 2>&1
}

render() {  # render TEMPLATE OUT KEY=VALUE...
  local template=$1 out=$2; shift 2
  local text; text=$(<"$template")
  for kv in "$@"; do text=${text//@${kv%%=*}@/${kv#*=}}; done
  printf '%s\n' "$text" >"$out"
}

# KWOK nodes of three sizes; each node's user latency is an annotation that can change at run time:
#   kubectl annotate node kwok-node-1 rlscore.io/latency-ms=50 --overwrite
create_nodes() {
  local count=$1 sizes latencies=(12 45 25 60 8 35 18 50)
  IFS=, read -ra sizes <<<"${NODE_CPUS:-8,16,4}"
  # emulated power curves (idle/max watts) by size, served as Kepler's series; NODE_POWER=0 leaves
  # them out (no power model known)
  local manifest=$OURS/nodes.yaml
  : >"$manifest"
  for ((i = 0; i < count; i++)); do
    local cores=${sizes[$((i % ${#sizes[@]}))]} latency=${latencies[$((i % 8))]}
    local idle=$((20 + cores * 6)) peak=$((40 + cores * 21)) power=""
    [ "${NODE_POWER:-1}" = 0 ] || power="    metrics.rlscore.io/power-idle-watts: \"$idle\"
    metrics.rlscore.io/power-max-watts: \"$peak\""
    cat >>"$manifest" <<EOF
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    node.alpha.kubernetes.io/ttl: "0"
    kwok.x-k8s.io/node: fake
    rlscore.io/latency-ms: "$latency"
    metrics.rlscore.io/cpu-cores: "$cores"
$power
  labels:
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
status:
  allocatable: {cpu: "$cores", memory: "$((cores * 2))Gi", pods: "110"}
  capacity: {cpu: "$cores", memory: "$((cores * 2))Gi", pods: "110"}
  nodeInfo: {architecture: amd64, operatingSystem: linux, kubeletVersion: fake, kubeProxyVersion: fake}
---
EOF
  done
  kubectl_ apply -f "$manifest" >/dev/null
}

# The server's default power history (Kepler's zones as rlscore.core.node_metrics reads them) samples
# every minute; a local cluster lives minutes, so every 5 s here (a busy spell between two tests is seen after a server restart).
LOCAL_POWER_HISTORY=$("$PY" -c 'from rlscore.core import node_metrics as m; print(m.POWER_MAX_HISTORY_QUERY.replace("[6h:1m]", "[1h:5s]"))' 2>/dev/null || true)

# The emulated node counters go backwards when pods leave (local-cluster/metrics.yaml), so the server
# reads cpu (and traffic, emulated from it) from cAdvisor's per-container counters, which end with
# their pod instead. A range selector keeps a series' samples for its whole window after the series
# went stale, so `and` keeps only containers that exist now (without it, a deleted pod's cpu counted
# for a minute); a node without pods reads 0.
LOCAL_BUSY_CORES='(sum by (node) (irate(container_cpu_usage_seconds_total{container!=""}[1m]) and on (namespace, pod, container) container_cpu_usage_seconds_total{container!=""}) or on (node) (0 * max by (node) (machine_cpu_cores)))'
LOCAL_CPU_QUERY="$LOCAL_BUSY_CORES / on (node) max by (node) (machine_cpu_cores)"
# how often the server refreshes its node metrics (calibration hands it to the simulator)
LOCAL_REFRESH_S=${RLSCORE_REFRESH_INTERVAL_S:-2}
# how the cpu query lags the pods here (measured: a pod's cpu shows 2.5-3 s after its creation, a
# gone one's ~1 s after it left; rlscore-calibrate's usageOnsetSeconds / usageLingerSeconds), with
# a scrape of margin: the drift check counts a pod's request only while its use can show
LOCAL_USAGE_ONSET_S=${RLSCORE_USAGE_ONSET_S:-5}
LOCAL_USAGE_LINGER_S=${RLSCORE_USAGE_LINGER_S:-2}
LOCAL_NETWORK_QUERY="$LOCAL_BUSY_CORES * 1000000 + 20000"

server_start() {
  # shellcheck disable=SC1091
  . "$OURS/ports.env"
  if [ -f "$OURS/server.pid" ] && kill -0 "$(cat "$OURS/server.pid")" 2>/dev/null; then
    return 0
  fi
  if [ "$CONTAINERS" = 1 ]; then
    server_container_start
    return
  fi
  log "starting the suggestion server on 127.0.0.1:$SERVER_PORT"
  # The server serves (and a promoted candidate replaces) the cluster's own copy of the shipped
  # models, never the repository's; retraining hands candidates to $OURS/models/candidates.
  [ -d "$OURS/models" ] || { mkdir -p "$OURS/models" && cp "$ROOT"/models/{ee,lb,el}.{safetensors,json} "$OURS/models/"; }
  RLSCORE_PROMETHEUS_URL=http://127.0.0.1:$PROMETHEUS_PORT \
  RLSCORE_KUBERNETES=kubeconfig RLSCORE_KUBECONFIG=$KUBECONFIG_FILE RLSCORE_ALLOW_UNAUTHENTICATED_CHANGES=true \
  RLSCORE_MODEL_DIR=$OURS/models RLSCORE_REFRESH_INTERVAL_S=$LOCAL_REFRESH_S \
  RLSCORE_USAGE_ONSET_S=$LOCAL_USAGE_ONSET_S RLSCORE_USAGE_LINGER_S=$LOCAL_USAGE_LINGER_S \
  RLSCORE_POWER_MAX_HISTORY_QUERY="${RLSCORE_POWER_MAX_HISTORY_QUERY:-$LOCAL_POWER_HISTORY}" \
  RLSCORE_CPU_QUERY="${RLSCORE_CPU_QUERY:-$LOCAL_CPU_QUERY}" \
  RLSCORE_NETWORK_QUERY="${RLSCORE_NETWORK_QUERY:-$LOCAL_NETWORK_QUERY}" \
    nohup "$ROOT/.venv/bin/rlscore-server" --host 127.0.0.1 --port "$SERVER_PORT" \
    >>"$OURS/server.log" 2>&1 &
  echo $! >"$OURS/server.pid"
  for _ in $(seq 1 150); do
    curl -sf "http://127.0.0.1:$SERVER_PORT/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$(cat "$OURS/server.pid")" 2>/dev/null || die "the suggestion server exited; see $OURS/server.log"
    sleep 0.2
  done
  die "the suggestion server did not become ready; see $OURS/server.log"
}

# The server from its image: host network, the cluster's files (kubeconfig, models: the rollout writes
# candidates there) mounted where they are, read-only root filesystem, as the user who owns those files.
server_container_start() {
  "${PODMAN[@]}" image exists "$SERVER_IMAGE" || die "no image $SERVER_IMAGE (run: make images)"
  local name=rlscore-server-$NAME
  [ -d "$OURS/models" ] || { mkdir -p "$OURS/models" && cp "$ROOT"/models/{ee,lb,el}.{safetensors,json} "$OURS/models/"; }
  "${PODMAN[@]}" rm -f "$name" >/dev/null 2>&1 || true
  log "starting the suggestion server from $SERVER_IMAGE on 127.0.0.1:$SERVER_PORT"
  "${PODMAN[@]}" run -d --name "$name" --network host --read-only --tmpfs /tmp --user "$(id -u):$(id -g)" \
    -v "$KWOK_WORKDIR:$KWOK_WORKDIR" -e RLSCORE_PROMETHEUS_URL="http://127.0.0.1:$PROMETHEUS_PORT" \
    -e RLSCORE_KUBERNETES=kubeconfig -e RLSCORE_KUBECONFIG="$KUBECONFIG_FILE" \
    -e RLSCORE_ALLOW_UNAUTHENTICATED_CHANGES=true -e RLSCORE_MODEL_DIR="$OURS/models" \
    -e RLSCORE_REFRESH_INTERVAL_S="$LOCAL_REFRESH_S" -e RLSCORE_USAGE_ONSET_S="$LOCAL_USAGE_ONSET_S" \
    -e RLSCORE_USAGE_LINGER_S="$LOCAL_USAGE_LINGER_S" -e RLSCORE_POWER_MAX_HISTORY_QUERY="$LOCAL_POWER_HISTORY" \
    -e RLSCORE_CPU_QUERY="$LOCAL_CPU_QUERY" -e RLSCORE_NETWORK_QUERY="$LOCAL_NETWORK_QUERY" \
    "$SERVER_IMAGE" --host 127.0.0.1 --port "$SERVER_PORT" >/dev/null
  echo "$name" >"$OURS/server.container"
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$SERVER_PORT/readyz" >/dev/null 2>&1 && return 0
    [ "$("${PODMAN[@]}" inspect -f '{{.State.Running}}' "$name" 2>/dev/null)" = true ] || {
      "${PODMAN[@]}" logs "$name" >"$OURS/server.log" 2>&1; die "the server container exited; see $OURS/server.log"; }
    sleep 0.2
  done
  "${PODMAN[@]}" logs "$name" >"$OURS/server.log" 2>&1
  die "the server container did not become ready; see $OURS/server.log"
}

# kwokctl starts this as its kube-scheduler binary: our image, with the paths kwokctl passes (all under
# KWOK_WORKDIR) mounted where they are, on the host's network.
write_scheduler_wrapper() {
  local path=$1
  "${PODMAN[@]}" image exists "$SCHEDULER_IMAGE" || die "no image $SCHEDULER_IMAGE (run: make images)"
  {
    echo '#!/usr/bin/env bash'
    echo "export CONTAINERS_CONF=$CONTAINERS_CONF"
    echo "exec ${PODMAN[*]} run --rm --name rlscore-scheduler-$NAME --network host --read-only --user $(id -u):$(id -g) \\"
    echo "  -v $KWOK_WORKDIR:$KWOK_WORKDIR:ro $SCHEDULER_IMAGE \"\$@\""
  } >"$path"
  chmod +x "$path"
}

server_stop() {
  if [ -f "$OURS/server.container" ]; then
    "${PODMAN[@]}" logs "rlscore-server-$NAME" >"$OURS/server.log" 2>&1 || true
    "${PODMAN[@]}" rm -f -t 5 "rlscore-server-$NAME" >/dev/null 2>&1 || true
    rm -f "$OURS/server.container"
  fi
  if [ -f "$OURS/server.pid" ]; then
    local pid; pid=$(cat "$OURS/server.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$OURS/server.pid"
  fi
}

up() {
  require_binaries
  if running; then
    log "cluster $NAME is already up"
    server_start
    status
    return 0
  fi
  exists && { log "cluster $NAME exists but is not answering: recreating it"; down; }
  local start=$SECONDS
  mkdir -p "$OURS"
  cat >"$OURS/ports.env" <<EOF
APISERVER_PORT=$(free_port)
PROMETHEUS_PORT=$(free_port)
SERVER_PORT=$(free_port)
SCHEDULER_PORT=$(free_port)
TLS_SERVER_PORT=$(free_port)
EOF
  # shellcheck disable=SC1091
  . "$OURS/ports.env"
  # TLS material for the rl-scheduler-tls profiles (tests start an HTTPS server on TLS_SERVER_PORT):
  # a CA that signed the server's certificate, and an unrelated one the server cannot satisfy
  "$ROOT/deploy/tls/self-signed.sh" --dir "$OURS/tls" --days 30 --san "IP:127.0.0.1,DNS:localhost" 2>/dev/null
  "$ROOT/deploy/tls/self-signed.sh" --dir "$OURS/tls-other" --days 30 2>/dev/null
  render "$ROOT/local-cluster/scheduler-config.yaml.tmpl" "$OURS/scheduler-config.yaml" \
    "SUGGEST_URL=http://127.0.0.1:$SERVER_PORT/suggest" "TLS_SUGGEST_URL=https://127.0.0.1:$TLS_SERVER_PORT/suggest" \
    "TLS_CA=$OURS/tls/ca.crt" "OTHER_CA=$OURS/tls-other/ca.crt"
  local scheduler=$BIN/kube-scheduler
  if [ "$CONTAINERS" = 1 ]; then
    scheduler=$OURS/kube-scheduler-container
    write_scheduler_wrapper "$scheduler"
  fi
  render "$ROOT/local-cluster/kwok.yaml.tmpl" "$OURS/kwok.yaml" "BIN=$BIN" "SCHEDULER_BINARY=$scheduler" \
    "PROMETHEUS=$(command -v prometheus)" "PROMETHEUS_DATA=$CLUSTER_DIR/prometheus-data" "KUBECTL=$BIN/kubectl" \
    "SCHEDULER_CONFIG=$OURS/scheduler-config.yaml" \
    "APISERVER_PORT=$APISERVER_PORT" "PROMETHEUS_PORT=$PROMETHEUS_PORT" "SCHEDULER_PORT=$SCHEDULER_PORT"
  log "creating cluster $NAME (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, prometheus)"
  "$KWOKCTL" create cluster --name "$NAME" --config "$OURS/kwok.yaml" --kubeconfig "$KUBECONFIG_FILE" \
    --wait 3m >"$OURS/kwokctl-create.log" 2>&1 || { tail -20 "$OURS/kwokctl-create.log" >&2; die "kwokctl create cluster failed; see $OURS/kwokctl-create.log"; }
  kubectl_ apply -f "$ROOT/local-cluster/metrics.yaml" >/dev/null
  # kwokctl's Prometheus scrapes every 15 s and discovers the per-node Metric endpoints every 60 s;
  # 2 s and 5 s make node and latency changes visible within seconds. The control plane's own
  # metrics (the API server's alone are megabytes) are scraped every 30 s: at 2 s they took a large
  # share of the two cores the scheduler is measured on.
  # Above 1 000 nodes every 15 s: scraping thousands of per-node endpoints every 2 s starved KWOK's
  # node updates on two cores (5 000 nodes never all got Ready).
  local scrape=2
  [ "$NODES" -le 1000 ] || scrape=15
  sed -i -e "s/^\(  \(scrape\|evaluation\)_interval:\) 15s/\1 ${scrape}s/" -e "s/^\(  scrape_timeout:\) 10s/\1 $((scrape < 10 ? scrape : 10))s/" \
    -e 's|^\(  - url: http.*/discovery/prometheus\)$|\1\n    refresh_interval: 5s|' \
    -e 's/^\(  job_name: \(etcd\|kube-apiserver\|kube-controller-manager\|kube-scheduler\|kwok-controller\|prometheus\)\)$/\1\n  scrape_interval: 30s\n  scrape_timeout: 10s/' \
    "$CLUSTER_DIR/prometheus.yaml"
  kill -HUP "$(cat "$CLUSTER_DIR/pids/prometheus.pid")"
  log "creating $NODES KWOK nodes"
  create_nodes "$NODES"
  # 120 s was too short for 5 000 nodes (measured on two cores: 3 335 Ready after 745 s with the
  # nodes scraped every 2 s; with 15 s, `up` took ~575 s in all)
  kubectl_ wait --for=condition=Ready node --all --timeout="$((120 + NODES / 8))s" >/dev/null
  server_start
  log "cluster $NAME up in $((SECONDS - start)) s"
  status
}

down() {
  server_stop
  "${PODMAN[@]}" rm -f -t 5 "rlscore-scheduler-$NAME" >/dev/null 2>&1 || true
  if [ -x "$KWOKCTL" ] && [ -d "$CLUSTER_DIR" ]; then
    log "deleting cluster $NAME"
    "$KWOKCTL" delete cluster --name "$NAME" --kubeconfig "$KUBECONFIG_FILE" >/dev/null 2>&1 || true
  fi
  rm -rf "$OURS" "$CLUSTER_DIR"
}

status() {
  exists || { echo "cluster $NAME: not created (make local-up)"; return 1; }
  # shellcheck disable=SC1091
  . "$OURS/ports.env"
  local state=down; running && state=up
  cat <<EOF
cluster $NAME: $state
  kube-apiserver     https://127.0.0.1:$APISERVER_PORT
  prometheus         http://127.0.0.1:$PROMETHEUS_PORT
  suggestion server  http://127.0.0.1:$SERVER_PORT   (POST /suggest, /docs, /metrics, /policies)
  kubeconfig         $KUBECONFIG_FILE
  logs               $CLUSTER_DIR/logs/ and $OURS/server.log
  try                export KUBECONFIG=$KUBECONFIG_FILE; kubectl get nodes
EOF
}

env_() {  # for scripts and tests: eval "$(cluster.sh env)"
  exists || die "cluster $NAME is not created"
  # shellcheck disable=SC1091
  . "$OURS/ports.env"
  cat <<EOF
export KUBECONFIG=$KUBECONFIG_FILE
export RLSCORE_LOCAL_APISERVER_PORT=$APISERVER_PORT
export RLSCORE_LOCAL_PROMETHEUS_URL=http://127.0.0.1:$PROMETHEUS_PORT
export RLSCORE_LOCAL_SERVER_URL=http://127.0.0.1:$SERVER_PORT
export RLSCORE_LOCAL_SCHEDULER_METRICS_URL=https://127.0.0.1:$SCHEDULER_PORT/metrics
export RLSCORE_LOCAL_TLS_SERVER_PORT=$TLS_SERVER_PORT
export RLSCORE_LOCAL_TLS_DIR=$OURS/tls
export RLSCORE_LOCAL_DIR=$OURS
export RLSCORE_LOCAL_CLUSTER_DIR=$CLUSTER_DIR
export RLSCORE_LOCAL_CPU_QUERY='$LOCAL_CPU_QUERY'
export RLSCORE_LOCAL_NETWORK_QUERY='$LOCAL_NETWORK_QUERY'
export RLSCORE_LOCAL_REFRESH_INTERVAL_S=$LOCAL_REFRESH_S
export RLSCORE_LOCAL_USAGE_ONSET_S=$LOCAL_USAGE_ONSET_S
export RLSCORE_LOCAL_USAGE_LINGER_S=$LOCAL_USAGE_LINGER_S
EOF
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  env) env_ ;;
  server-start) server_start ;;
  server-stop) server_stop ;;
  nodes) create_nodes "${2:-$NODES}" ;;
  *) echo "usage: $0 up|down|status|env|server-start|server-stop|nodes [N]" >&2; exit 2 ;;
esac
