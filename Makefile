# The two README commands: `make run` and `make test`. Both create and reuse .venv.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck pytest crds bench clean kubectl image

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25.1"

$(STAMP): pyproject.toml $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[all]" --group dev
	touch $(STAMP)

# The default scenario (scale-from-zero) for ten virtual minutes: a few seconds of wall time.
run: $(STAMP)
	$(BIN)/karpenter-capi simulate scale-from-zero

# kubectl and chromium are optional: the tests that drive the real kubectl, and the one that
# screenshots the HTML report, skip with a reason when they are absent. Where we are root on
# Debian and they are missing, install Debian's packages so CI runs them.
kubectl:
	@command -v kubectl >/dev/null 2>&1 && command -v chromium >/dev/null 2>&1 || { \
	  [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    kubernetes-client chromium) >/dev/null 2>&1 \
	  || echo "kubectl/chromium not installed; the tests that need them will be skipped"; }

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# One worker per core, each taking whole test files (a module's shared fixtures are built once).
pytest: $(STAMP) kubectl
	$(BIN)/pytest -q -n auto --dist loadfile

test: lint typecheck pytest

# deploy/crds/ is the source; the Helm chart and the Kustomize base carry copies (Helm installs
# only crds/ inside the chart, Kustomize loads nothing from outside its directory).
crds: $(STAMP)
	$(BIN)/karpenter-capi manifests --crds --split deploy/crds
	cp deploy/crds/*.yaml deploy/charts/karpenter-capi/crds/
	cp deploy/crds/*.yaml deploy/kustomize/base/crds/

bench: $(STAMP)
	$(BIN)/python benchmarks/apiserver_bench.py
	$(BIN)/python benchmarks/scheduling.py --mix diverse
	$(BIN)/python benchmarks/scheduling.py --mix generic

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache .import_linter_cache

# The container image (deploy/Containerfile; docs/image.md) with docker, else podman. No test
# uses it. EXTRAS=aws|azure|all adds the cloud plugins' SDKs; IMAGE names the repository.
IMAGE ?= karpenter-capi
EXTRAS ?=
comma := ,
IMAGE_VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)
IMAGE_TAG ?= $(IMAGE_VERSION)$(if $(EXTRAS),-$(subst $(comma),-,$(EXTRAS)))

image:
	@engine="$$(command -v docker || command -v podman)" || { \
	  echo "make image: neither docker nor podman is installed" >&2; exit 1; }; \
	set -x; "$$engine" build -f deploy/Containerfile \
	  --build-arg EXTRAS="$(EXTRAS)" \
	  --build-arg VERSION="$(IMAGE_VERSION)" \
	  --build-arg REVISION="$$(git rev-parse HEAD 2>/dev/null)" \
	  --build-arg SOURCE_URL="$$(git remote get-url origin 2>/dev/null)" \
	  -t "$(IMAGE):$(IMAGE_TAG)" .
