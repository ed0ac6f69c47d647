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

.PHONY: local-bin local-up local-down local-status e2e images kind-up kind-down check-docker help install deps test py-test go-test check-go scheduler train eval tuner tune-compare tune-examples retrain sim-to-real bench demo clean verify golden serve-venv
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

deps: ## Debian packages the tests use (Prometheus), installed with apt-get when missing
	@command -v prometheus >/dev/null || { echo "installing Prometheus from Debian's packages"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
	    --no-install-recommends prometheus >/dev/null; }

test: py-test go-test e2e ## the test suite: unit, integration (real Prometheus, uvicorn, scheduler, Go) and end to end on a fresh local cluster

py-test: install serve-venv deps check-go bin/kubectl bin/helm ## Python unit and integration tests
	GO=$(GO) $(PY) -m pytest --ignore=tests/e2e -m "not reproduction"

e2e: local-bin bin/helm install deps ## end-to-end tests on a fresh local cluster (builds the binaries first)
	$(PY) -m pytest tests/e2e -m "not reproduction"

verify: install deps ## re-run the experiments behind the shipped models' figures (reproduction tier, ~1 h)
	GO=$(GO) $(PY) -m pytest -m reproduction
	@for p in ee lb el; do $(PY) -m agent.evaluate.shipped verify models/$$p.safetensors || exit 1; done

golden: install ## rewrite the Go scorer's golden fixtures from the Python reference (after a feature, rule or model change)
	$(PY) -m tests.golden

check-go:
	@command -v $(GO) >/dev/null || { echo "plugin-go needs Go 1.25 or newer on PATH (https://go.dev/dl/)"; exit 1; }

go-test: check-go ## Go tests only (gofmt, go vet, go test, including the real scheduler framework)
	@cd plugin-go && unformatted=$$(gofmt -l .) && if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	cd plugin-go && $(GO) vet ./... && $(GO) test ./...

scheduler: bin/kube-scheduler ## build our kube-scheduler (upstream + RLScore) into bin/

bin/kube-scheduler: $(GO_SOURCES) | check-go
	cd plugin-go && $(GO) build -trimpath -ldflags "$(SCHEDULER_LDFLAGS)" -o ../bin/kube-scheduler ./cmd/kube-scheduler

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
SCHEDULER_IMAGE := $(REGISTRY)/kube-scheduler:$(K8S_VERSION)-rlscore.0
SERVER_IMAGE := $(REGISTRY)/suggestion-server:0.1.0
PROBE_IMAGE := $(REGISTRY)/latency-probe:0.1.0

check-docker:
	@command -v docker >/dev/null || { echo "docker not found: images and kind need Docker (make local-up needs none)"; exit 1; }
	@docker info >/dev/null 2>&1 || { echo "no Docker engine is running ('docker info' failed): start one, or use make local-up, which needs none"; exit 1; }

images: check-docker ## build the scheduler, suggestion server and probe images (REGISTRY=rlscore)
	docker build -t $(SCHEDULER_IMAGE) plugin-go
	docker build -f deploy/images/suggestion-server.Dockerfile -t $(SERVER_IMAGE) .
	docker build -f deploy/images/latency-probe.Dockerfile -t $(PROBE_IMAGE) .

HELM_VERSION := v3.22.0
bin/helm: | check-go
	@echo "building helm $(HELM_VERSION) from the Go module proxy"
	GOBIN=$(CURDIR)/bin $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

bin/kind: | check-go
	GOBIN=$(CURDIR)/bin $(GO) install sigs.k8s.io/kind@$(KIND_VERSION)

kind-up: check-docker bin/kind bin/kubectl images ## kind cluster (1 control plane + 3 workers) with rlscore deployed
	@bin/kind get clusters 2>/dev/null | grep -qx rlscore || bin/kind create cluster --config kind-config.yaml
	bin/kind load docker-image --name rlscore $(SCHEDULER_IMAGE) $(SERVER_IMAGE) $(PROBE_IMAGE)
	bin/kubectl --context kind-rlscore apply -k deploy/overlays/kind
	bin/kubectl --context kind-rlscore -n rlscore-system rollout status deployment/rlscore-suggestion-server deployment/rl-scheduler --timeout=300s
	@echo "rlscore is running on kind. Try: bin/kubectl --context kind-rlscore apply -f examples/nginx-deployment.yaml"
	@echo "and: bin/kubectl --context kind-rlscore get pods -o wide"

kind-down: bin/kind ## delete the kind cluster
	bin/kind delete cluster --name rlscore

CANDIDATES := build/candidates
train: install ## per policy: PPO, the teachers' clone (uniform and log-uniform cluster sizes), DQN and rule-selector candidates (~30 min per policy), the best shipped into models/
	@mkdir -p $(CANDIDATES)
	@for p in EE LB EL; do \
	  lower=$$(echo $$p | tr A-Z a-z); gamma=0.99; [ $$p = LB ] && gamma=0.95; \
	  for algo in ppo dqn; do \
	    echo "== $$p $$algo"; \
	    $(VENV)/bin/rlscore-train --policy $$p --algo $$algo --gamma $$gamma --seed $(SEED) --out $(CANDIDATES) \
	      --name $$lower-$$algo.safetensors --no-progress || exit 1; \
	  done; \
	  for draw in uniform log-uniform; do \
	    echo "== $$p clone ($$draw cluster sizes)"; \
	    $(VENV)/bin/rlscore-train --policy $$p --algo ppo --timesteps 0 --gamma $$gamma --seed $(SEED) --out $(CANDIDATES) \
	      --node-draw $$draw --name $$lower-clone-$$draw.safetensors --no-progress || exit 1; \
	  done; \
	  echo "== $$p rule selector"; \
	  $(VENV)/bin/rlscore-train --policy $$p --algo selector --seed $(SEED) --out $(CANDIDATES) --node-draw log-uniform \
	    --name $$lower-selector.safetensors --no-progress || exit 1; \
	  $(PY) -m agent.evaluate.shipped pick models/$$lower.safetensors $(CANDIDATES)/$$lower-ppo.safetensors \
	    $(CANDIDATES)/$$lower-clone-uniform.safetensors $(CANDIDATES)/$$lower-clone-log-uniform.safetensors $(CANDIDATES)/$$lower-dqn.safetensors \
	    $(CANDIDATES)/$$lower-selector.safetensors || exit 1; \
	  $(PY) -m agent.evaluate.shipped holdout models/$$lower.safetensors --no-progress || exit 1; \
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

bench: install deps local-bin ## print figures: models, training, /suggest, plugin overhead, cluster throughput
	PYTHONPATH=$(CURDIR) $(PY) bench/agent_bench.py
	PYTHONPATH=$(CURDIR) $(PY) bench/server_bench.py
	cd plugin-go && $(GO) test ./pkg/rlscore/ -run '^$$' -bench 'PreScoreScore|ClusterRequestedFromSnapshot' -benchtime 2s
	PYTHONPATH=$(CURDIR) $(PY) bench/cluster_bench.py

demo: local-up ## the local cluster + the thesis's test pattern per policy: where the pods landed
	@eval "$$(local-cluster/cluster.sh env)" && $(PY) -m agent.live.demo

clean: ## remove build output (keeps models/)
	rm -rf eval runs demo-output .pytest_cache bin
