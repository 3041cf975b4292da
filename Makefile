# Developer entry points. `make test` is what CI runs (.ci/run); `make demo` is the main job.
# Cluster targets drive the local Kubernetes control plane used by the e2e tests (see docs/testing.md).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUN := PATH="$(CURDIR)/$(VENV)/bin:$$PATH"

.PHONY: help dev demo demo-down lint unit real contract e2e e2e-extended real-engines test crds golden bench node-packages cluster-build cluster-up cluster-down cluster-status
.DEFAULT_GOAL := help
LINTED := operator tests e2e bench

help: ## list the targets with what they do
	@awk 'BEGIN {FS = ":[^#]*## "} /^[a-z][a-zA-Z0-9_-]*:[^#]*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(VENV)/.installed: pyproject.toml requirements/dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check uv
	$(VENV)/bin/uv pip install --quiet --python $(PY) -c requirements/dev.txt -e '.[dev]'
	touch $@

dev: $(VENV)/.installed ## create .venv with the operator and its test tools

lint: dev ## ruff and ruff format over operator, tests, e2e and bench; mypy --strict over the operator
	$(RUN) ruff check $(LINTED)
	$(RUN) ruff format --check $(LINTED)
	$(RUN) mypy

# PYTHONDONTWRITEBYTECODE cleared (D220): with it set, every run compiles every import again and pytest rewrites
# every test module again, which doubled the CPU time of the reconciler's fake-API tier (31 s instead of 14 s).
unit: dev ## unit, golden, property and layer tests, the CLI, and the reconciler against a fake API server
	$(RUN) PYTHONDONTWRITEBYTECODE= pytest tests --ignore=tests/contract --ignore=tests/real

real: dev ## the P/D frontend against real vLLM CPU engines on the host (tests/real; builds its venv once; 15-25 min)
	$(RUN) pytest tests/real -m real_engines -s

contract: dev ## rendered command lines against the real vLLM 0.33.0 and vllm-router 0.1.17 parsers
	@# The parsers' venv (6 GB, built once, cached) is made before pytest: cold, it takes longer than a test may.
	tests/contract/env.sh >/dev/null
	$(RUN) pytest tests/contract

e2e: dev cluster-build node-packages ## end-to-end tests on the local control plane and its real node, the served-request real-engine tier included (not the extended modules)
	$(RUN) pytest e2e -m "not extended" --durations=25

e2e-extended: dev cluster-build node-packages ## the heavy e2e modules outside make test: every P/D flow and the serving check on real engines, the real Mooncake daemons (30-60 min)
	$(RUN) pytest e2e -m extended

real-engines: dev cluster-build node-packages ## the whole real-engine tier (served request and, from the extended set, every flow): real vLLM CPU engines in pods behind the endpoint
	$(RUN) pytest e2e -m real_engines

# Cold, most of `make test` is compiling the control plane (CPU), downloading the contract tier's parsers (a 6 GB
# venv) and building the e2e images (PyPI, the Debian mirror, the disk): `make test` starts all three in the
# background before lint and waits for them before the tiers that need them, so they overlap each other and the
# Python tiers; each image is imported into the real node's image store as soon as it is built, so the real-engine
# tier does not spend minutes importing the engine image after the cluster is up (e2e/images/preload.py).
# Warm, all three are no-ops (stamps, a lock hash, input-keyed images already in the store). `make contract` and the e2e
# fixtures build what they need either way (env.sh serialises concurrent builds); this only overlaps. The image
# build is not niced: its steps wait on the network and the disk in turn, and niced it starved behind the Go builds
# (its base image took 36 minutes instead of 1 in a cold run).
CACHE_DIR := $${DISAGG_CACHE_DIR:-$$HOME/.cache/disagg-operator}
CLUSTER_BUILD_LOG := $(CACHE_DIR)/cluster-build.log
IMAGES_PREFETCH_LOG := $(CACHE_DIR)/images-prefetch.log
CONTRACT_ENV_LOG := $(CACHE_DIR)/contract-env.log

test: dev node-packages ## everything CI runs: lint, unit, contract and e2e (the control plane and the e2e images build meanwhile)
	@mkdir -p "$(CACHE_DIR)"; \
	echo "make test: building the control plane in the background (log: $(CLUSTER_BUILD_LOG))"; \
	e2e/controlplane/build.sh >"$(CLUSTER_BUILD_LOG)" 2>&1 & build=$$!; \
	echo "make test: building the contract tier's parser venv in the background (log: $(CONTRACT_ENV_LOG))"; \
	tests/contract/env.sh >"$(CONTRACT_ENV_LOG)" 2>&1 & \
	if [ "$${DISAGG_E2E_REAL_NODE:-1}" != 0 ]; then \
		echo "make test: building the e2e images and importing them into the real node's store in the background (log: $(IMAGES_PREFETCH_LOG))"; \
		( $(RUN) python -m e2e.images preload >"$(IMAGES_PREFETCH_LOG)" 2>&1 \
			|| echo "make test: the background image build or import failed; the e2e suite builds again and reports it" ) & \
	fi; \
	$(MAKE) --no-print-directory lint \
		|| { echo "make test: lint failed (background builds may still run)"; exit 1; }; \
	echo "make test: the unit and contract tiers side by side (each prints when it ends)"; \
	$(MAKE) --no-print-directory -j2 --output-sync=target unit contract \
		|| { echo "make test: failed before the e2e suite (background builds may still run; logs above)"; exit 1; }; \
	echo "make test: waiting for the control plane build"; \
	wait $$build || { echo "make test: the control plane build failed:"; tail -n 60 "$(CLUSTER_BUILD_LOG)"; exit 1; }; \
	tail -n 1 "$(CLUSTER_BUILD_LOG)"; \
	echo "make test: waiting for the e2e images"; \
	wait; \
	$(MAKE) --no-print-directory e2e

# REAL_ENGINES=1: serve for real (real vLLM CPU engines on the local cluster's real node, a curl command at the end).
REAL_ENGINES ?= 0
demo: dev ## the main job: a cluster, the operator, a DisaggDeployment on fake GPUs (REAL_ENGINES=1: real vLLM CPU engines you can curl)
	DISAGG_DEMO_REAL_ENGINES=$(REAL_ENGINES) $(RUN) python -m e2e.demo up

demo-down: dev ## stop the demo's operator and cluster
	$(RUN) python -m e2e.demo down

crds: dev ## regenerate crds/ from the API models
	$(RUN) disagg crd > crds/disagg.dev_disaggdeployments.yaml

cluster-build: ## build/cache etcd, kube-*, kubectl, kwok, helm, LWS, Prometheus and the real node's kubelet, CNI, DNS (cold: 25-45 min on 2 cores)
	e2e/controlplane/build.sh

node-packages: ## install Debian's containerd, runc, iptables and iproute2 for the real node when missing (root; skipped with DISAGG_E2E_REAL_NODE=0)
	@if [ "$${DISAGG_E2E_REAL_NODE:-1}" != 0 ]; then e2e/node-packages.sh; fi

cluster-up: dev node-packages ## start the local control plane with fake GPU nodes and the real node (idempotent)
	$(RUN) python -m e2e.localcluster up

cluster-down: ## stop it and remove its state
	$(RUN) python -m e2e.localcluster down

cluster-status: ## report whether the local control plane is up and healthy
	$(RUN) python -m e2e.localcluster status

golden: dev ## regenerate tests/golden from examples/ (a change detector: give a changed behaviour its own test first)
	for f in examples/*.yaml; do $(RUN) disagg render -n default -f $$f > tests/golden/$$(basename $$f); done

bench: dev ## render benchmark (docs/performance.md records the figures)
	$(RUN) python bench/render_bench.py

# ---- install path: Helm chart and plain manifests (docs/install.md) ------------------------------------------------
# The pinned helm that `make cluster-build` puts in the e2e cache; helm on PATH otherwise.
HELM = $(shell p=$$($(PY) -c 'from e2e.localcluster.config import BinDir; print(BinDir.default().binary("helm"))' 2>/dev/null); \
	if [ -x "$$p" ]; then echo "$$p"; else echo helm; fi)

.PHONY: chart-sync manifests chart-test

chart-sync: ## copy the generated CRD (crds/) into the Helm chart; run after `make crds`
	cp crds/disagg.dev_disaggdeployments.yaml charts/disagg-operator/crds/disagg.dev_disaggdeployments.yaml

manifests: dev chart-sync ## render manifests/install.yaml from the chart's defaults with the pinned helm
	HELM="$(HELM)" charts/render-manifests.sh > manifests/install.yaml.tmp
	mv manifests/install.yaml.tmp manifests/install.yaml

chart-test: dev ## chart tests: unit (no helm) and helm lint/template/schema/manifests plus install on the local cluster
	$(RUN) pytest tests/unit/chart
	$(RUN) pytest e2e/test_helm.py
