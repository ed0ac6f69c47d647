# rlscore — `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# A CPU build of torch beside the repo (on the dev/CI machines) saves fetching the CUDA build.
TORCH_WHEEL := $(wildcard ../shared/wheels/torch-*+cpu-*.whl)
SEED ?= 1
GO ?= go
GO_SOURCES := $(shell find plugin-go -name '*.go' -o -name 'go.mod' -o -name 'go.sum')
K8S_VERSION := v1.35.4
# What `kube-scheduler --version` reports: the pinned release plus our suffix.
K8S_VERSION_FLAGS = -X k8s.io/component-base/version.gitVersion=$(1) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=35 \
	-X k8s.io/component-base/version.gitTreeState=clean
SCHEDULER_LDFLAGS := $(call K8S_VERSION_FLAGS,$(K8S_VERSION)-rlscore)
KWOK_VERSION := v0.8.0
LOCAL_BINARIES := bin/etcd bin/kube-apiserver bin/kube-controller-manager bin/kubectl bin/kwok bin/kwokctl bin/kube-scheduler

.PHONY: local-bin local-up local-down local-status e2e images kind-up kind-down check-docker help install deps test py-test go-test check-go scheduler train eval tuner tune-compare tune-examples retrain sim-to-real bench demo clean verify golden serve-venv ray-venv docs deps-containers
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

help: ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@if [ -n "$(TORCH_WHEEL)" ]; then echo "installing CPU torch from $(TORCH_WHEEL)"; \
	  $(PY) -m pip install --quiet "$(TORCH_WHEEL)"; fi
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

install: $(VENV)/.installed ## create .venv and install rlscore with its dev tools

SERVE_VENV := .venv-serve
SERVE_SOURCES := $(shell find rlscore suggestion_server latency_probe -name '*.py' 2>/dev/null)
$(SERVE_VENV)/.installed: pyproject.toml $(SERVE_SOURCES)
	@test -x $(SERVE_VENV)/bin/python || $(PYTHON) -m venv $(SERVE_VENV)
	$(SERVE_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SERVE_VENV)/bin/python -m pip install --quiet '.[serve]' && $(SERVE_VENV)/bin/python -m pip install --quiet --no-deps --force-reinstall .
	@touch $@

serve-venv: $(SERVE_VENV)/.installed ## a venv with only rlscore[serve] (what the server image installs): no torch

# .venv has no Ray (so the suite checks that every command works without it); .venv-ray is .venv plus
# rlscore[distributed]: a .pth file puts .venv's packages on its path, so only Ray itself is installed
RAY_VENV := .venv-ray
$(RAY_VENV)/.installed: $(VENV)/.installed
	@test -x $(RAY_VENV)/bin/python || $(PYTHON) -m venv $(RAY_VENV)
	@rm -f $(RAY_VENV)/lib/python*/site-packages/rlscore-dev.pth
	$(RAY_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(RAY_VENV)/bin/python -m pip install --quiet "ray>=2.9"
	@# last, so that pip above never sees .venv's own pip on its path
	$(RAY_VENV)/bin/python -c 'import sysconfig, pathlib; site = pathlib.Path(sysconfig.get_path("purelib")); \
	  dev = pathlib.Path("$(VENV)").resolve() / site.relative_to(sysconfig.get_path("data")); \
	  (site / "rlscore-dev.pth").write_text(f"import site; site.addsitedir({str(dev)!r})\n")'
	@touch $@

ray-venv: $(RAY_VENV)/.installed ## .venv plus Ray (rlscore[distributed]) for the Ray tests and benchmarks

deps: ## Debian packages the tests use (Prometheus), installed with apt-get when missing
	@command -v prometheus >/dev/null || { echo "installing Prometheus from Debian's packages"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
	    --no-install-recommends prometheus >/dev/null; }

test: py-test go-test e2e ## the test suite: unit, integration (real Prometheus, uvicorn, scheduler, Go) and end to end on a fresh local cluster

# two pytest workers (a module stays on one, with its servers and clusters); the tests that need a
# quiet machine run after them, alone
PYTEST_WORKERS ?= 2
py-test: install serve-venv ray-venv deps check-go bin/kubectl bin/helm images ## Python unit and integration tests
	GO=$(GO) $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadscope --ignore=tests/e2e -m "not reproduction and not serial"
	GO=$(GO) $(PY) -m pytest --ignore=tests/e2e -m "serial and not reproduction"

# KubeRay's RayCluster CRD, from the operator's Go module, for the e2e test of deploy/overlays/ray
KUBERAY_VERSION := v1.5.0
build/crds/ray.io_rayclusters.yaml: | check-go
	@mkdir -p build/crds
	dir=$$(cd plugin-go && $(GO) mod download -json github.com/ray-project/kuberay/ray-operator@$(KUBERAY_VERSION) \
	  | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p') && cp "$$dir/config/crd/bases/ray.io_rayclusters.yaml" $@ && chmod u+w $@

e2e: local-bin bin/helm install deps images build/crds/ray.io_rayclusters.yaml ## end-to-end tests on a fresh local cluster (builds the binaries first)
	$(PY) -m pytest tests/e2e -m "not reproduction"

verify: install deps ## re-run the experiments behind the shipped models' figures (reproduction tier, ~1 h)
	GO=$(GO) $(PY) -m pytest -m reproduction
	@for p in ee lb el; do $(PY) -m agent.evaluate.shipped verify models/$$p.safetensors || exit 1; done

docs: install ## rewrite the generated sections of README and docs/operations.md (policies from the sidecars, settings, metrics)
	$(PY) -m suggestion_server.reference --write
	$(PY) -m agent.evaluate.report readme --write

golden: install ## rewrite the Go scorer's golden fixtures from the Python reference (after a feature, rule or model change)
	$(PY) -m tests.golden

check-go:
	@command -v $(GO) >/dev/null || { echo "plugin-go needs Go 1.25 or newer on PATH (https://go.dev/dl/)"; exit 1; }

go-test: check-go ## Go tests only (gofmt, go vet, go test, including the real scheduler framework)
	@cd plugin-go && unformatted=$$(gofmt -l .) && if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	cd plugin-go && $(GO) vet ./... && $(GO) test ./...

mutations: check-go ## change the Go scorer one thing at a time (a feature, a rule, pooling, a weight): go test must fail on each
	GO=$(GO) python3 hack/go_mutations.py

scheduler: bin/kube-scheduler ## build our kube-scheduler (upstream + RLScore) into bin/

# static (CGO off): the same binary runs on the host and, copied, in the scheduler image
bin/kube-scheduler: $(GO_SOURCES) | check-go
	cd plugin-go && CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(SCHEDULER_LDFLAGS)" -o ../bin/kube-scheduler ./cmd/kube-scheduler

local-bin: $(LOCAL_BINARIES) ## build etcd, kube-apiserver, kube-controller-manager, kubectl, kwok, kwokctl, kube-scheduler into bin/

bin/etcd: local-cluster/binaries/etcd/go.mod local-cluster/binaries/etcd/main.go | check-go
	cd local-cluster/binaries/etcd && $(GO) build -trimpath -o $(CURDIR)/$@ .

bin/kube-apiserver bin/kube-controller-manager bin/kubectl: local-cluster/binaries/kubernetes/go.mod | check-go
	@echo "building $@ (several minutes the first time)"
	cd local-cluster/binaries/kubernetes && $(GO) build -trimpath -ldflags "$(call K8S_VERSION_FLAGS,$(K8S_VERSION))" \
	  -o $(CURDIR)/$@ k8s.io/kubernetes/cmd/$(notdir $@)

bin/kwok bin/kwokctl: local-cluster/binaries/kwok/go.mod | check-go
	cd local-cluster/binaries/kwok && $(GO) build -trimpath -ldflags "-X sigs.k8s.io/kwok/pkg/consts.Version=$(KWOK_VERSION)" \
	  -o $(CURDIR)/$@ sigs.k8s.io/kwok/cmd/$(notdir $@)

NODES ?= 4
local-up: local-bin install deps ## start the local cluster (NODES=4 KWOK nodes) with Prometheus and the suggestion server
	NODES=$(NODES) local-cluster/cluster.sh up

local-down: ## delete the local cluster
	local-cluster/cluster.sh down

local-status: ## ports, kubeconfig and logs of the local cluster
	@local-cluster/cluster.sh status

KIND_VERSION := v0.31.0
REGISTRY ?= rlscore
VERSION := 0.1.0
SCHEDULER_IMAGE := $(REGISTRY)/kube-scheduler:$(K8S_VERSION)-rlscore.0
SERVER_IMAGE := $(REGISTRY)/suggestion-server:$(VERSION)
PROBE_IMAGE := $(REGISTRY)/latency-probe:$(VERSION)
TRAINER_IMAGE := $(REGISTRY)/trainer:$(VERSION)

check-docker:
	@command -v docker >/dev/null || { echo "docker not found: kind needs Docker (make local-up and make images need none)"; exit 1; }
	@docker info >/dev/null 2>&1 || { echo "no Docker engine is running ('docker info' failed): start one, or use make local-up, which needs none"; exit 1; }

# Images are built with docker where a daemon runs, else with buildah (and run with podman), from Debian's
# packages. CONTAINERS_CONF: this machine's sandbox refuses podman's default ulimits.
export CONTAINERS_CONF := $(CURDIR)/deploy/images/containers.conf
PODMAN := podman --storage-driver vfs --runtime runc --cgroup-manager cgroupfs
BUILDAH := buildah --storage-driver vfs
IMAGE_TOOL ?= $(shell docker info >/dev/null 2>&1 && echo docker || echo buildah)
DEBIAN_MIRROR ?= $(shell sed -n 's/^URIs: *\(http[^ ]*debian\)$$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
# Base images: a slim Python and distroless/static from their registries, as users pull them; where no
# registry answers (BASE_FROM=debootstrap, chosen by itself then), a Debian base built with debootstrap
# and scratch.
BASE_FROM ?= $(shell curl -sf -o /dev/null --max-time 5 https://registry-1.docker.io/v2/ || [ $$? = 22 ] && echo registry || echo debootstrap)
ifeq ($(BASE_FROM),debootstrap)
BASE := localhost/rlscore/debian-python:bookworm
STATIC_BASE := scratch
else
BASE := docker.io/library/python:3.11-slim
STATIC_BASE := gcr.io/distroless/static-debian12:nonroot
endif
ifeq ($(IMAGE_TOOL),docker)
BUILD_IMAGE = docker build
LIST_IMAGE = docker image inspect --format '{{.Size}}'
else
BUILD_IMAGE = $(BUILDAH) bud --isolation chroot --layers=false
LIST_IMAGE = $(PODMAN) image inspect --format '{{.Size}}'
endif

deps-containers: ## buildah, podman, runc, uidmap and debootstrap from Debian's packages, when missing
	@command -v buildah >/dev/null && command -v podman >/dev/null && command -v runc >/dev/null \
	  && command -v debootstrap >/dev/null || { echo "installing buildah, podman, runc, uidmap, debootstrap"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
	    --no-install-recommends buildah podman runc uidmap debootstrap >/dev/null; }

build/images/debian-python.stamp: | deps-containers
	@echo "building a Debian base with Python (debootstrap, $(DEBIAN_MIRROR))"
	@rm -rf build/images/rootfs && mkdir -p build/images
	$(SUDO) debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm \
	  build/images/rootfs $(DEBIAN_MIRROR) >build/images/debootstrap.log 2>&1
	$(SUDO) rm -rf build/images/rootfs/var/cache/apt/archives/*.deb build/images/rootfs/var/lib/apt/lists/* \
	  build/images/rootfs/usr/share/doc build/images/rootfs/usr/share/man build/images/rootfs/usr/share/info \
	  build/images/rootfs/usr/share/locale build/images/rootfs/var/cache/debconf/*-old
	$(SUDO) tar -C build/images/rootfs -c . | $(PODMAN) import - $(BASE) >/dev/null
	$(SUDO) rm -rf build/images/rootfs
	@touch $@

build/images/kube-scheduler: bin/kube-scheduler
	@mkdir -p build/images
	cp bin/kube-scheduler $@

# wheels built on the host, where pip reaches the package index: the image builds need no network
# from a copy of the source without agent/ (training): the images carry only what they serve
build/src-serve.stamp: pyproject.toml README.md $(SERVE_SOURCES)
	@rm -rf build/src-serve && mkdir -p build/src-serve
	cp -r pyproject.toml README.md rlscore suggestion_server latency_probe build/src-serve/
	@find build/src-serve -name __pycache__ -prune -exec rm -rf {} +
	@touch $@

build/wheels/serve.stamp: build/src-serve.stamp | $(VENV)/.installed
	@rm -rf build/wheels/serve && mkdir -p build/wheels/serve
	$(PY) -m pip wheel --quiet --wheel-dir build/wheels/serve './build/src-serve[serve]'
	@touch $@

build/wheels/probe.stamp: build/src-serve.stamp | $(VENV)/.installed
	@rm -rf build/wheels/probe && mkdir -p build/wheels/probe
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir build/wheels/probe ./build/src-serve
	$(PY) -m pip wheel --quiet --wheel-dir build/wheels/probe "prometheus-client>=0.20"
	@touch $@

# the training image's wheels: the whole source tree with the train and distributed extras (torch from
# TORCH_WHEEL where it is set, as for .venv)
build/wheels/train.stamp: pyproject.toml README.md $(SERVE_SOURCES) $(shell find agent -name '*.py') | $(VENV)/.installed
	@rm -rf build/wheels/train build/src-train && mkdir -p build/wheels/train build/src-train
	cp -r pyproject.toml README.md rlscore suggestion_server latency_probe agent build/src-train/
	@find build/src-train -name __pycache__ -prune -exec rm -rf {} +
	$(PY) -m pip wheel --quiet --wheel-dir build/wheels/train $(if $(TORCH_WHEEL),"$(TORCH_WHEEL)") './build/src-train[train,distributed]'
	@touch $@

image-trainer: deps-containers build/wheels/train.stamp $(if $(filter debootstrap,$(BASE_FROM)),build/images/debian-python.stamp) ## the retraining and Ray image (rlscore[train,distributed], ~2 GB)
	$(BUILD_IMAGE) -f deploy/images/trainer.Containerfile --build-arg BASE=$(BASE) \
	  --build-arg VERSION=$(VERSION) -t $(TRAINER_IMAGE) .
	@printf '%-48s %6d MB\n' $(TRAINER_IMAGE) $$(( $$($(LIST_IMAGE) $(TRAINER_IMAGE)) / 1000000 ))

print-images: ## print the three image references `make images` builds
	@echo $(SCHEDULER_IMAGE) $(SERVER_IMAGE) $(PROBE_IMAGE)

images: deps-containers build/images/kube-scheduler build/wheels/serve.stamp build/wheels/probe.stamp $(if $(filter debootstrap,$(BASE_FROM)),build/images/debian-python.stamp) ## build the scheduler, server and probe images (REGISTRY=rlscore) and print their sizes
	$(BUILD_IMAGE) -f deploy/images/kube-scheduler.Containerfile --build-arg STATIC_BASE=$(STATIC_BASE) \
	  --build-arg VERSION=$(K8S_VERSION)-rlscore.0 -t $(SCHEDULER_IMAGE) .
	$(BUILD_IMAGE) -f deploy/images/suggestion-server.Containerfile --build-arg BASE=$(BASE) \
	  --build-arg VERSION=$(VERSION) -t $(SERVER_IMAGE) .
	$(BUILD_IMAGE) -f deploy/images/latency-probe.Containerfile --build-arg BASE=$(BASE) \
	  --build-arg VERSION=$(VERSION) -t $(PROBE_IMAGE) .
	@for image in $(SCHEDULER_IMAGE) $(SERVER_IMAGE) $(PROBE_IMAGE); do \
	  printf '%-48s %6d MB\n' $$image $$(( $$($(LIST_IMAGE) $$image) / 1000000 )); done

HELM_VERSION := v3.22.0
bin/helm: | check-go
	@echo "building helm $(HELM_VERSION) from the Go module proxy"
	GOBIN=$(CURDIR)/bin $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

bin/kind: | check-go
	GOBIN=$(CURDIR)/bin $(GO) install sigs.k8s.io/kind@$(KIND_VERSION)

kind-up: check-docker bin/kind bin/kubectl images ## kind cluster (1 control plane + 3 workers) with rlscore deployed, the images make images built loaded into it
	@bin/kind get clusters 2>/dev/null | grep -qx rlscore || bin/kind create cluster --config kind-config.yaml
	bin/kind load docker-image --name rlscore $(SCHEDULER_IMAGE) $(SERVER_IMAGE) $(PROBE_IMAGE)
	bin/kubectl --context kind-rlscore apply -k deploy/overlays/kind
	bin/kubectl --context kind-rlscore -n rlscore-system rollout status deployment/rlscore-suggestion-server deployment/rl-scheduler --timeout=300s
	@echo "rlscore is running on kind. Try: bin/kubectl --context kind-rlscore apply -f examples/nginx-deployment.yaml"
	@echo "and: bin/kubectl --context kind-rlscore get pods -o wide"

kind-down: bin/kind ## delete the kind cluster
	bin/kind delete cluster --name rlscore

CANDIDATES := build/candidates
train: install ## per policy: the DQN and its demonstrations-only twin (~15 min each on 2 cores), both evaluated; the DQN shipped into models/ (with the ablation in its sidecar) unless behind the model there on the mixed worlds or missing more goals beyond noise
	@mkdir -p $(CANDIDATES)
	@for p in EE LB EL; do \
	  lower=$$(echo $$p | tr A-Z a-z); \
	  echo "== $$p: DQN from demonstrations"; \
	  $(VENV)/bin/rlscore-train --policy $$p --seed $(SEED) --out $(CANDIDATES) --name $$lower.safetensors --no-progress || exit 1; \
	  echo "== $$p: the same demonstrations alone (the ablation)"; \
	  $(VENV)/bin/rlscore-train --policy $$p --seed $(SEED) --demonstrations-only --out $(CANDIDATES) \
	    --name $$lower-demonstrations.safetensors --no-eval --no-progress || exit 1; \
	  $(PY) -m agent.evaluate.shipped ship models/$$lower.safetensors $(CANDIDATES)/$$lower.safetensors \
	    --twin $(CANDIDATES)/$$lower-demonstrations.safetensors --no-progress; \
	  rc=$$?; [ $$rc = 0 ] || [ $$rc = 3 ] || exit $$rc; \
	done

eval: install ## evaluate the shipped models against the baselines (tables and plots in eval/)
	@for p in EE LB EL; do $(VENV)/bin/rlscore-eval --policy $$p --out eval/$$p || exit 1; done

tuner: install ## train the RL tuner of score-plugin weights (~13 min on 2 cores) into models/tuner.pt
	$(PY) -m agent.tune.train_tuner --clusters 120 --seed $(SEED) --out models/tuner.pt

tune-compare: install ## the RL tuner vs random / BO / TPE / default weights / learned scorer on held-out clusters (eval/tune/)
	$(PY) -m agent.tune.compare --clusters 12 --trials 5 --out eval/tune

tune-examples: install ## rewrite examples/scheduler-config/rl-tuned-{ee,lb,el}.yaml from the example cluster profiles
	@for pair in ee:hardware-16n lb:usage-skew-16n el:scarce-near-16n; do \
	  p=$${pair%%:*}; f=$${pair#*:}; \
	  $(VENV)/bin/rlscore-tune --policy $$p --profile examples/cluster-profiles/$$f.yaml --method all \
	    --out build/tune-examples/$$p || exit 1; \
	  cp build/tune-examples/$$p/rl-tuned.yaml examples/scheduler-config/rl-tuned-$$p.yaml; \
	done

POLICY ?= EE
WINDOW ?= 30m
retrain: install ## on the local cluster: calibrate -> fine-tune -> gate -> hand the candidate to the server (POLICY=EE WINDOW=30m)
	@env=$$(local-cluster/cluster.sh env) && eval "$$env" && $(VENV)/bin/rlscore-retrain --policy $(POLICY) \
	  --prometheus "$$RLSCORE_LOCAL_PROMETHEUS_URL" --kubeconfig "$$KUBECONFIG" --window $(WINDOW) \
	  --query "node_cpu_busy=$$RLSCORE_LOCAL_CPU_QUERY" --metrics-interval "$$RLSCORE_LOCAL_REFRESH_INTERVAL_S" \
	  --model-dir "$$RLSCORE_LOCAL_DIR/models" --start-from models/$$(echo $(POLICY) | tr A-Z a-z).safetensors \
	  --work build/retrain/$(POLICY)

RUNS ?= 3
PODS ?= 300
sim-to-real: install ## on the local cluster: live runs of a hot workload replayed in the calibrated simulator (POLICY=EE RUNS=3 PODS=300)
	@env=$$(local-cluster/cluster.sh env) && eval "$$env" && $(PY) -m agent.live.sim_to_real --policy $(POLICY) \
	  --runs $(RUNS) --pods $(PODS) --out eval/sim-to-real/$(POLICY)-runs.json

bench: install ray-venv deps local-bin images ## print figures: models, training, /suggest (also under faults), plugin overhead, cluster throughput, image sizes
	PYTHONPATH=$(CURDIR) $(PY) bench/agent_bench.py
	PYTHONPATH=$(CURDIR) $(PY) bench/server_bench.py
	PYTHONPATH=$(CURDIR) $(PY) bench/fault_bench.py
	PYTHONPATH=$(CURDIR) $(RAY_VENV)/bin/python bench/ray_bench.py
	cd plugin-go && $(GO) test ./pkg/rlscore/ -run '^$$' -bench 'PreScoreScore|ClusterRequestedFromSnapshot' -benchtime 2s
	PYTHONPATH=$(CURDIR) $(PY) bench/cluster_bench.py

demo: local-up ## the local cluster + the thesis's test pattern per policy: where the pods landed
	@eval "$$(local-cluster/cluster.sh env)" && $(PY) -m agent.live.demo

clean: ## remove build output (keeps models/)
	rm -rf eval runs demo-output .pytest_cache bin build
