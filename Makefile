# captf — see README.md. Every target builds the tools it needs into bin/ first.

SHELL := /usr/bin/env bash -o pipefail -e
.DEFAULT_GOAL := build

GO        ?= go
BIN       := $(CURDIR)/bin
export CAPTF_BIN_DIR   := $(BIN)
export CAPTF_REPO_ROOT := $(CURDIR)

K8S_VERSION  := v1.37.2
K8S_MINOR    := 37
TOFU_VERSION := 1.10.10

# Without these the binaries report v0.0.0-master and kubectl cannot parse the server version.
K8S_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=$(K8S_MINOR) \
	-X k8s.io/component-base/version.gitTreeState=clean \
	-X k8s.io/client-go/pkg/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/client-go/pkg/version.gitMajor=1 \
	-X k8s.io/client-go/pkg/version.gitMinor=$(K8S_MINOR)
TOFU_LDFLAGS := -s -w -X github.com/opentofu/opentofu/version.dev=no

K8S_TOOLS := $(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kubectl $(BIN)/etcd
GEN_TOOLS := $(BIN)/controller-gen $(BIN)/deepcopy-gen $(BIN)/conversion-gen $(BIN)/defaulter-gen $(BIN)/openapi-gen
CAPI_TOOLS := $(BIN)/capi-manager $(BIN)/capi-kubeadm-bootstrap $(BIN)/clusterctl
PROM_TOOLS := $(BIN)/promtool
# Real OpenTofu providers, built from the module proxy into an unpacked filesystem mirror
# (<host>/<namespace>/<type>/<version>/<os>_<arch>/terraform-provider-<type>_v<version>): the
# sample machine module's image carries this mirror, and tests serve it as a network mirror.
PROVIDER_MIRROR := $(BIN)/providers/registry.opentofu.org/hashicorp
PROVIDERS := $(PROVIDER_MIRROR)/time/0.14.2/linux_amd64/terraform-provider-time_v0.14.2 \
	$(PROVIDER_MIRROR)/local/1.4.0/linux_amd64/terraform-provider-local_v1.4.0
TOOLS     := $(K8S_TOOLS) $(BIN)/tofu $(GEN_TOOLS) $(BIN)/golangci-lint $(CAPI_TOOLS) $(PROM_TOOLS) $(PROVIDERS)

GO_FILES = $(shell find . -name '*.go' -not -path './bin/*' -not -path './.local/*' -not -path './tmp/*')
# A count, not a duration: Go before 1.27 can fail a duration-bounded fuzz run with "context
# deadline exceeded" at the deadline (go.dev/issue/75804), with nothing found.
FUZZ_TIME ?= 10000x
TEST_TIMEOUT ?= 60m

.PHONY: help
help: ## Show the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

##@ Tools (built from the Go module proxy, cached in bin/)

.PHONY: tools
tools: $(TOOLS) ## Build the control plane, OpenTofu, the code generators, golangci-lint, Cluster API's core manager and kubeadm bootstrap provider, clusterctl, promtool and the provider mirror bin/providers (time, local) into bin/ (skips what exists).

$(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kubectl: hack/tools/k8s/go.mod hack/tools/k8s/go.sum
	@mkdir -p $(BIN)
	cd hack/tools/k8s && $(GO) build -ldflags '$(K8S_LDFLAGS)' -o $@ k8s.io/kubernetes/cmd/$(notdir $@)

$(BIN)/etcd: hack/tools/k8s/go.mod hack/tools/k8s/go.sum
	@mkdir -p $(BIN)
	cd hack/tools/k8s && $(GO) build -ldflags '-s -w' -o $@ go.etcd.io/etcd/server/v3

$(BIN)/tofu: hack/tools/tofu/go.mod hack/tools/tofu/go.sum
	@mkdir -p $(BIN)
	cd hack/tools/tofu && CGO_ENABLED=0 $(GO) build -ldflags '$(TOFU_LDFLAGS)' -o $@ github.com/opentofu/opentofu/cmd/tofu

# Static, as a module image holds them, and reproducible: the sample machine module's lock file
# pins their hashes, so the toolchain is pinned too.
PROVIDER_BUILD := CGO_ENABLED=0 GOOS=linux GOARCH=amd64 GOTOOLCHAIN=go1.26.8
$(PROVIDER_MIRROR)/time/%: hack/tools/providers/time/go.mod hack/tools/providers/time/go.sum
	@mkdir -p $(dir $@)
	cd hack/tools/providers/time && $(PROVIDER_BUILD) $(GO) build -trimpath -ldflags '-s -w -buildid=' -o $@ github.com/hashicorp/terraform-provider-time

$(PROVIDER_MIRROR)/local/%: hack/tools/providers/local/go.mod hack/tools/providers/local/go.sum
	@mkdir -p $(dir $@)
	cd hack/tools/providers/local && $(PROVIDER_BUILD) $(GO) build -trimpath -ldflags '-s -w -buildid=' -o $@ github.com/terraform-providers/terraform-provider-local

# Cluster API's version, stamped as its release build does: clusterctl compares it with the
# providers' contracts.
CAPI_LDFLAGS := -s -w -X sigs.k8s.io/cluster-api/version.gitVersion=v1.14.2 -X sigs.k8s.io/cluster-api/version.gitMajor=1 -X sigs.k8s.io/cluster-api/version.gitMinor=14

$(BIN)/capi-manager: hack/tools/capi/go.mod hack/tools/capi/go.sum
	@mkdir -p $(BIN)
	cd hack/tools/capi && $(GO) build -ldflags '$(CAPI_LDFLAGS)' -o $@ sigs.k8s.io/cluster-api/core

$(BIN)/capi-kubeadm-bootstrap: hack/tools/capi/go.mod hack/tools/capi/go.sum
	@mkdir -p $(BIN)
	cd hack/tools/capi && $(GO) build -ldflags '$(CAPI_LDFLAGS)' -o $@ sigs.k8s.io/cluster-api/bootstrap/kubeadm

$(BIN)/clusterctl: hack/tools/capi/go.mod hack/tools/capi/go.sum
	@mkdir -p $(BIN)
	cd hack/tools/capi && $(GO) build -ldflags '$(CAPI_LDFLAGS)' -o $@ sigs.k8s.io/cluster-api/cmd/clusterctl

$(BIN)/controller-gen: hack/tools/gen/go.mod hack/tools/gen/go.sum
	@mkdir -p $(BIN)
	cd hack/tools/gen && $(GO) build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(BIN)/deepcopy-gen $(BIN)/conversion-gen $(BIN)/defaulter-gen: hack/tools/gen/go.mod hack/tools/gen/go.sum
	@mkdir -p $(BIN)
	cd hack/tools/gen && $(GO) build -o $@ k8s.io/code-generator/cmd/$(notdir $@)

$(BIN)/openapi-gen: hack/tools/gen/go.mod hack/tools/gen/go.sum
	@mkdir -p $(BIN)
	cd hack/tools/gen && $(GO) build -o $@ k8s.io/kube-openapi/cmd/openapi-gen

$(BIN)/golangci-lint: hack/tools/lint/go.mod hack/tools/lint/go.sum
	@mkdir -p $(BIN)
	cd hack/tools/lint && $(GO) build -ldflags '-s -w' -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

# For the alerts' unit tests (artifacts/monitoring). remove_all_sd leaves out the cloud
# providers' service discoveries, which rule tests never use and which more than double the
# build (about 8 minutes cold on 2 cores without them).
.PHONY: promtool
promtool: $(BIN)/promtool ## Build Prometheus's promtool into bin/ for the alerts' unit tests (go test ./artifacts/monitoring).

$(BIN)/promtool: hack/tools/prometheus/go.mod hack/tools/prometheus/go.sum
	@mkdir -p $(BIN)
	cd hack/tools/prometheus && $(GO) build -tags remove_all_sd -ldflags '-s -w' -o $@ github.com/prometheus/prometheus/cmd/promtool

##@ Development

.PHONY: generate
generate: $(GEN_TOOLS) ## Generate CRDs, deepcopy, conversion, defaults and OpenAPI.
	hack/update-codegen.sh

.PHONY: verify-generated
verify-generated: $(GEN_TOOLS) ## Fail when generated files are not up to date.
	hack/verify-codegen.sh

.PHONY: build
build: ## Build the binaries into bin/, static as the images hold them, with the plugin's completion entry beside kubectl-captf.
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ ./cmd/...
	install -m 0755 cmd/kubectl-captf/kubectl_complete-captf $(BIN)/

# A module to check or lock: its directory, role, the object's variables and its image's
# provider mirror (empty for a module without providers).
MODULE        ?= artifacts/samples/modules/machine
MODULE_ROLE   ?= machine
MODULE_VARS   ?= {"name":"check"}
MODULE_MIRROR ?= $(BIN)/providers

.PHONY: module-check
module-check: $(BIN)/tofu $(PROVIDERS) ## Check MODULE as captf runs it for MODULE_ROLE: providers from MODULE_MIRROR only (pinned by its lock file), every contract input and output declared.
	$(GO) run ./hack/modulecheck --role=$(MODULE_ROLE) --module=$(MODULE) --providers=$(MODULE_MIRROR) --tofu=$(BIN)/tofu --variables='$(MODULE_VARS)'

.PHONY: module-lock
module-lock: $(BIN)/tofu $(PROVIDERS) ## Write MODULE's .terraform.lock.hcl from the providers of MODULE_MIRROR (linux_amd64).
	cd $(MODULE) && TF_DATA_DIR=$$(mktemp -d) $(BIN)/tofu providers lock -fs-mirror=$(MODULE_MIRROR) -platform=linux_amd64

.PHONY: fmt
fmt: ## Format the Go code.
	gofmt -w $(GO_FILES)

.PHONY: lint
lint: $(BIN)/golangci-lint ## go vet, a gofmt check, then golangci-lint (config: .golangci.yml).
	$(GO) vet ./...
	@bad=$$(gofmt -l $(GO_FILES)); if [ -n "$$bad" ]; then echo "gofmt would change:"; echo "$$bad"; exit 1; fi
	$(BIN)/golangci-lint run ./...

.PHONY: test
test: tools lint verify-generated ## Everything CI runs: lint, generated-code check, all tests with -race (real control plane), the full-size load suite, bounded fuzzing.
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v '/test/reliability/load$$')
	$(MAKE) --no-print-directory load
	$(MAKE) --no-print-directory fuzz

# The load suite runs at full size without the race detector: the servers it loads are separate
# binaries either way, and a race-instrumented client would be the bottleneck it measures.
LOAD_JOBS    ?= 10000
LOAD_SECONDS ?= 60

.PHONY: load
load: ## Run the load suite (50 watchers, 20 lists/s on runs) over LOAD_JOBS Jobs for LOAD_SECONDS, printing its figures.
	CAPTF_LOAD_JOBS=$(LOAD_JOBS) CAPTF_LOAD_SECONDS=$(LOAD_SECONDS) $(GO) test -count=1 -timeout 30m -v ./test/reliability/load 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok)|FIGURE|_test.go'

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZ_TIME each (executions, or a duration such as 30s).
	hack/fuzz.sh $(FUZZ_TIME)

.PHONY: bench
bench: tools ## Run the benchmarks and print their table.
	$(GO) test -run='^$$' -bench=. -benchmem -count=1 -timeout $(TEST_TIMEOUT) ./... | grep -E '^(Benchmark|goos|goarch|pkg|cpu|ok|PASS|FAIL)'

BENCH_SIZES ?= 10000 30000

.PHONY: bench-scale
bench-scale: tools ## Run the aggregated benchmarks at each of BENCH_SIZES retained Jobs (e.g. BENCH_SIZES="10000 30000 100000") and print a table per size.
	hack/bench-scale.sh $(BENCH_SIZES)

IMAGES_OUT ?= dist/images
VERSION    ?= dev
# host:port[/prefix] to push the images to as well, e.g. REGISTRY=127.0.0.1:5000 (plain HTTP on loopback).
REGISTRY   ?=

.PHONY: images
images: $(PROVIDERS) ## Build the manager, API server and sample module images (static binaries, non-root, reproducible) into the OCI layout IMAGES_OUT, tagged VERSION; with REGISTRY=host:port[/prefix], push them there too.
	$(GO) run ./hack/images -out $(IMAGES_OUT) -version $(VERSION) $(if $(REGISTRY),-registry $(REGISTRY))

INSTALL_OVERLAY ?= self-managed
INSTALL_OUT     ?= dist/install.yaml

.PHONY: install-yaml
install-yaml: ## Render the install (INSTALL_OVERLAY: self-managed or cert-manager) naming the images pushed to REGISTRY as VERSION, into INSTALL_OUT.
	@mkdir -p $(dir $(INSTALL_OUT))
	$(GO) run ./hack/install -overlay $(INSTALL_OVERLAY) $(if $(REGISTRY),-repository $(REGISTRY)/) -version $(VERSION) -out $(INSTALL_OUT)

CLUSTERCTL_REPO ?= dist/clusterctl

.PHONY: clusterctl-repo
clusterctl-repo: ## Write the clusterctl provider repository (components, metadata.yaml, cluster template) from artifacts/ into CLUSTERCTL_REPO.
	$(GO) run ./hack/clusterctl -artifacts artifacts -out $(CLUSTERCTL_REPO)

DIST_OUT ?= dist
# Where the archives are published: each platform's uri in the manifest is DIST_BASE_URL/<archive>.
# Empty means the GitHub release of the version.
DIST_BASE_URL ?=

# The images' default VERSION, dev, is no version krew installs: without a VERSION given, the
# plugin takes the release version hack/dist defaults to.
.PHONY: dist
dist: ## Cross-build the kubectl plugin for linux, darwin (amd64, arm64) and windows/amd64 into reproducible archives in DIST_OUT, with sha256sums.txt and the krew manifest captf.yaml (uris under DIST_BASE_URL).
	$(GO) run ./hack/dist -out $(DIST_OUT) $(if $(filter-out dev,$(VERSION)),-version $(VERSION)) $(if $(DIST_BASE_URL),-base-url $(DIST_BASE_URL))

.PHONY: run
run: tools build ## Start a local control plane with captf installed; Ctrl-C stops it.
	$(GO) build -o $(BIN)/localcluster ./hack/localcluster
	$(BIN)/localcluster

.PHONY: clean
clean: ## Remove built binaries (not the tools).
	rm -f $(BIN)/controller $(BIN)/apiserver $(BIN)/runner $(BIN)/localcluster
