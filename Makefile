# butler-provider-harvester. Every tool is pinned in hack/tools and built from Go modules; the
# test control plane (kube-apiserver, etcd) too. A fresh machine needs Go and make only.

IMG ?= ghcr.io/butlerdotdev/butler-provider-harvester:dev
GO ?= go
TOOLS := $(GO) tool -modfile=hack/tools/go.mod
CONTROLLER_GEN := $(TOOLS) controller-gen
HELM := $(GO) tool -modfile=hack/tools/helm/go.mod helm
KUSTOMIZE := $(GO) tool -modfile=hack/tools/kustomize/go.mod kustomize
GOLANGCI_LINT := $(GO) tool -modfile=hack/tools/golangci-lint/go.mod golangci-lint
ACTIONLINT := $(GO) tool -modfile=hack/tools/actionlint/go.mod actionlint
CRD_REF_DOCS := $(GO) tool -modfile=hack/tools/crd-ref-docs/go.mod crd-ref-docs
CHART := charts/butler-provider-harvester
# The representative integration tests that run again on Butler's published CRD sets
# (test/testdata/butler-crds): lifecycle, restarts, safety, bootstrap, deletion, ImageSync (not on
# the Butler CLI's set, which has no ImageSync CRD). The whole suite runs on the project's CRDs.
BUTLER_SCHEMA_TESTS ?= ^(TestLifecycle|TestHealthyBootIsQuiet|TestRestartWhileCreating|TestNamespaceEditAfterRestart|TestDeletionWithoutCredentialsAfterRestart|TestInstalledSchemaDetected|TestBootstrapMachinePhase|TestProviderConfigNamespaceEditedWhileRunning|TestRerunTakesOverTheVMOfTheSameMachineRequestName|TestDeletionBlockedSaysWhy|TestVMDeletedOutOfBand|TestDeletedWhileCreating|TestConfigurationProblemFailsAfterGraceAndRetriesWhenFixed|TestPublishedProviderMachineAdopted|TestTwoManagementClustersShareAHarvesterNamespace|TestLeftoverDiskAndSecretWithoutVMTakenOver|TestImageSyncGoesReady)$$
# Packages under test; the integration tests start two real API servers each.
TEST_PKGS ?= ./...
TEST_FLAGS ?= -count=1 -timeout=15m
# The end-to-end scenarios, which take a minute or two each: two management clusters on one
# Harvester with the real clusterctl move (directly and through a backup directory), forgeries
# across them, what move leaves behind, clusterctl delete, a hosted control plane, and the tenant
# isolation, restore and rotation scenarios, static addresses from an IPAM provider's pools, and a
# MachineDeployment scaled from zero by its template's capacity, machines with dedicated CPUs and
# UEFI firmware with a TPM, and clusters of the ClusterClasses through the real topology controller.
# make test-e2e runs them and make test does not; a new scenario joins them by its name
# (TestClusterAPIMove..., TestClusterAPI...Tenant..., ...Restore..., ...Rotation..., ...IPAM..., ...Capacity...,
# ...Devices..., TestClusterAPIClusterClass...) and calls t.Parallel() first: it starts a world of its own and
# shares no package state.
E2E_TESTS ?= ^TestClusterAPI(Move|HostedControlPlane|ClusterClass|.*(Tenant|Restore|Rotation|IPAM|Capacity|Devices))
E2E_PKGS ?= ./test/capi/
# The scenarios run three at a time (each starts its own API servers, managers and simulated
# Harvester, and waits on them more than it computes); under that load an API server may take
# longer than envtest's default 20 s to start.
E2E_FLAGS ?= -count=1 -timeout=30m -parallel=3
E2E_START_TIMEOUT ?= 90s
# The test control plane (kube-apiserver, etcd): KUBEBUILDER_ASSETS when it is set (as
# setup-envtest sets it), else built from Go modules once and cached. The same for Cluster API's
# manager and clusterctl with CAPI_ASSETS.
CONTROLPLANE_ASSETS := assets=$${KUBEBUILDER_ASSETS:-$$(bash hack/tools/controlplane.sh)}
CAPI_BUILT := capi=$${CAPI_ASSETS:-$$(bash hack/tools/capi.sh)}

.DEFAULT_GOAL := help

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: ## Generate deepcopy code from the API types.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: manifests
manifests: ## Generate CRDs and RBAC from the markers in the code, and copy them into the Helm chart (not the Cluster API CRDs of config/crd/infrastructure).
	$(CONTROLLER_GEN) crd paths=./api/v1alpha1/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) crd paths=./api/platform/... output:crd:artifacts:config=config/crd/platform
	$(CONTROLLER_GEN) crd paths=./api/infrastructure/... output:crd:artifacts:config=config/crd/infrastructure
	$(CONTROLLER_GEN) rbac:roleName=manager-role paths="./internal/controller/...;./cmd/manager/..." output:rbac:artifacts:config=config/rbac
	cp config/crd/bases/*.yaml $(CHART)/crds/
	cp config/rbac/role.yaml $(CHART)/files/manager-role.yaml
	cp config/rbac/leader_election_role.yaml $(CHART)/files/leader-election-role.yaml
	cp config/rbac/metrics_reader_role.yaml $(CHART)/files/metrics-reader-role.yaml

.PHONY: api-docs
api-docs: ## Generate the API reference in docs/reference: the types (crd-ref-docs, pinned in hack/tools), and the conditions and reasons from their constants (hack/reasons-docs); and the package diagram of docs/architecture.md from internal/layering's table (hack/layering-docs).
	$(CRD_REF_DOCS) --config hack/api-docs.yaml --source-path ./api/v1alpha1 --renderer markdown --output-path docs/reference/api.md --log-level WARN
	$(CRD_REF_DOCS) --config hack/api-docs.yaml --source-path ./api/infrastructure --renderer markdown --output-path docs/reference/infrastructure-api.md --log-level WARN
	$(GO) run ./hack/reasons-docs
	$(GO) run ./hack/layering-docs

.PHONY: verify-generated
verify-generated: generate manifests api-docs ## Fail if generated files (CRDs, RBAC, deepcopy, their copies in the chart, the API reference, the package diagram) are stale.
	@if [ -n "$$(git status --porcelain -- api config $(CHART) docs/reference docs/architecture.md)" ]; then \
		echo "Generated files are stale; run 'make generate manifests api-docs' and commit:"; \
		git status --porcelain -- api config $(CHART) docs/reference docs/architecture.md; git --no-pager diff -- api config $(CHART) docs/reference docs/architecture.md | head -50; exit 1; fi
	@echo "Generated files are up to date."

.PHONY: fmt
fmt: ## Format the code.
	$(GO) fmt ./...

.PHONY: vet
vet: ## Run go vet.
	$(GO) vet ./...

.PHONY: lint
lint: ## golangci-lint with .golangci.yml (go vet, staticcheck, gosec, revive, ...; gofmt and goimports), chaos test included; actionlint on the workflows.
	$(GOLANGCI_LINT) run ./...
	$(ACTIONLINT)

.PHONY: helm-lint
helm-lint: ## helm lint the chart (make test also lints and renders it).
	$(HELM) lint --strict $(CHART)

.PHONY: tools
tools: ## Build every pinned tool once (controller-gen, helm, kustomize, golangci-lint, actionlint, crd-ref-docs); they are cached by Go.
	$(CONTROLLER_GEN) --version
	$(HELM) version --short
	$(KUSTOMIZE) version
	$(GOLANGCI_LINT) version
	$(ACTIONLINT) -version
	$(CRD_REF_DOCS) --version

.PHONY: controlplane
controlplane: ## Build kube-apiserver and etcd from Go modules (once; cached) and print their directory.
	@bash hack/tools/controlplane.sh

.PHONY: capi
capi: ## Build the Cluster API core manager, kubeadm bootstrap provider and clusterctl from Go modules (once; cached) and print their directory.
	@bash hack/tools/capi.sh

.PHONY: kubectl
kubectl: ## Build kubectl from Go modules (once; cached) and print its path.
	@echo "$$(bash hack/tools/controlplane.sh kubectl)/kubectl"

.PHONY: test
test: ## Run the tests: unit, integration on real API servers (again on Butler's published CRDs), the install (chart, kustomize, RBAC, metrics), and the real Cluster API core manager; not the end-to-end scenarios (make test-e2e).
	@$(CONTROLPLANE_ASSETS) && $(CAPI_BUILT) && \
		KUBEBUILDER_ASSETS=$$assets CAPI_ASSETS=$$capi $(GO) test $(TEST_FLAGS) -skip '$(E2E_TESTS)' $(TEST_PKGS) && \
		echo "Integration tests on Butler's CRDs of butler-api v0.13.0" && \
		KUBEBUILDER_ASSETS=$$assets BUTLER_TEST_SCHEMA=butler-api-v0.13.0 $(GO) test $(TEST_FLAGS) -run '$(BUTLER_SCHEMA_TESTS)' ./test/integration/ && \
		echo "Integration tests on the Butler CLI's CRDs (no ImageSync CRD)" && \
		KUBEBUILDER_ASSETS=$$assets BUTLER_TEST_SCHEMA=butler-cli $(GO) test $(TEST_FLAGS) -run '$(BUTLER_SCHEMA_TESTS)' -skip '^(TestImageSync|TestBootstrapMachinePhase)' ./test/integration/

# The packages whose tests exercise concurrent code (informers, caches, the simulator, the
# reconcilers on real API servers); test/deploy only drives tools and binaries it builds.
RACE_PKGS ?= ./internal/... ./test/sim/... ./test/testbed/... ./test/integration/ ./test/capi/
RACE_FLAGS ?= -count=1 -timeout=20m
# The end-to-end scenarios run in make test-e2e only: the reconcilers they drive run under the
# race detector in the other Cluster API tests, and the takeover's concurrent claimants in
# internal/harvester's unit tests.
RACE_SKIP ?= $(E2E_TESTS)
.PHONY: test-race
test-race: ## Unit, simulator, integration and Cluster API tests under the race detector (needs cgo: a C compiler).
	@$(CONTROLPLANE_ASSETS) && $(CAPI_BUILT) && \
		KUBEBUILDER_ASSETS=$$assets CAPI_ASSETS=$$capi $(GO) test -race $(RACE_FLAGS) -skip '$(RACE_SKIP)' $(RACE_PKGS)

.PHONY: test-all
test-all: test test-e2e ## Every test: make test, then make test-e2e (the README's test command; CI runs it).

.PHONY: test-e2e
test-e2e: ## The end-to-end scenarios (E2E_TESTS): two management clusters with clusterctl move, through a backup too, forgeries, a hosted control plane, tenant isolation; the real Cluster API core manager and clusterctl.
	@$(CONTROLPLANE_ASSETS) && $(CAPI_BUILT) && \
		KUBEBUILDER_ASSETS=$$assets CAPI_ASSETS=$$capi KUBEBUILDER_CONTROLPLANE_START_TIMEOUT=$(E2E_START_TIMEOUT) \
		$(GO) test $(E2E_FLAGS) -run '$(E2E_TESTS)' $(E2E_PKGS)

.PHONY: demo
demo: ## Run the provider end to end on a simulated Harvester (no cluster needed). DEMO_FLAGS=--keep to explore.
	@$(CONTROLPLANE_ASSETS) && \
		KUBEBUILDER_ASSETS=$$assets $(GO) run ./test/demo $(DEMO_FLAGS)

.PHONY: demo-capi
demo-capi: ## The Cluster API door end to end on a simulated Harvester: the real Cluster API core manager, kubeadm bootstrap provider and clusterctl (built once by hack/tools/capi.sh), a tenant cluster of the hosted flavour. DEMO_FLAGS=--keep to explore; DEMO_FLAGS=--static-addresses puts the workers on an IP pool (Cluster API IPAM).
	@$(CONTROLPLANE_ASSETS) && $(CAPI_BUILT) && \
		KUBEBUILDER_ASSETS=$$assets CAPI_ASSETS=$$capi $(GO) run ./test/demo --capi $(DEMO_FLAGS)

N ?= 100
.PHONY: bench
bench: ## Benchmark N machines end to end, as MachineRequests and as a Cluster API MachineDeployment, by DHCP and from an IP pool (default 100; N=1000 documented), and add the table to .bench/report.md (git ignores it; BENCH_FLAGS=-report=PATH for another file).
	@$(CONTROLPLANE_ASSETS) && $(CAPI_BUILT) && \
		KUBEBUILDER_ASSETS=$$assets CAPI_ASSETS=$$capi $(GO) run ./test/bench -n $(N) $(BENCH_FLAGS)
	@echo "Go benchmarks of the object builders, IP selection and decoding a VM watch event:"
	$(GO) test -run '^$$' -bench . -benchmem ./internal/harvester/

# The published provider's commit make bench-published builds (hack/tools/published-provider.sh):
# the newest of its main branch, on butler-api v0.13.0. PUBLISHED_GIT, if set, is a clone of it to
# build from (else the script clones it from GitHub).
PUBLISHED_COMMIT ?= fabb05a3b7f4ddd2bfd1905d524acb40862241d5
.PHONY: bench-published
bench-published: ## Optional, not in make bench or CI: the published provider (built from its source at PUBLISHED_COMMIT) side by side with this one, N MachineRequests (the first three runs: it has no Cluster API) on a Harvester v1.7 simulator and Butler's CRDs; adds one table with both to .bench/report.md.
	@$(CONTROLPLANE_ASSETS) && \
		published=$$(PUBLISHED_COMMIT=$(PUBLISHED_COMMIT) bash hack/tools/published-provider.sh) && \
		KUBEBUILDER_ASSETS=$$assets $(GO) run ./test/bench -n $(N) -runs=3 -schema=butler-api-v0.13.0 -legacy-image-storage-class-names \
			-published-manager=$$published -published-commit=$(PUBLISHED_COMMIT) $(BENCH_FLAGS)

SCALE_N ?= 5000
SCALE_HARVESTERS ?= 5
SCALE_STANDING ?= 30m
SCALE_DOOR ?= machinerequests
SCALE_RUNS_machinerequests := -runs=1
SCALE_RUNS_clusterapi := -runs=4 -only='cluster api'
.PHONY: bench-scale
bench-scale: ## Optional, not in CI: a platform's shape: SCALE_N machines (5000) over SCALE_HARVESTERS simulated Harvester clusters (5), one ProviderConfig each, as MachineRequests (SCALE_DOOR=machinerequests) or one Cluster API Cluster and MachineDeployment on each (SCALE_DOOR=clusterapi); the manager's memory per machine, its watches and connections per cluster, its standing cost over SCALE_STANDING (30m) and a restart, beside the floor of that many clusters. SCALE_N=1000 SCALE_HARVESTERS=2 SCALE_STANDING=2m to iterate.
	@$(if $(SCALE_RUNS_$(SCALE_DOOR)),,echo "SCALE_DOOR must be machinerequests or clusterapi, not '$(SCALE_DOOR)'" >&2; exit 2;) \
	$(CONTROLPLANE_ASSETS) && $(CAPI_BUILT) && \
		KUBEBUILDER_ASSETS=$$assets CAPI_ASSETS=$$capi $(GO) run ./test/bench -n $(SCALE_N) -harvesters $(SCALE_HARVESTERS) -standing $(SCALE_STANDING) -restart $(SCALE_RUNS_$(SCALE_DOOR)) -timeout=60m $(BENCH_FLAGS)

UPGRADE_FROM ?= HEAD^
.PHONY: bench-upgrade
bench-upgrade: ## Optional, not in CI: N machines run by this repository's manager at UPGRADE_FROM (the previous commit; built by hack/tools/manager-at.sh), as MachineRequests and as a Cluster API MachineDeployment, then upgraded to this one: the time until every machine is observed again, what it read and wrote.
	@$(CONTROLPLANE_ASSETS) && $(CAPI_BUILT) && from=$$(bash hack/tools/manager-at.sh $(UPGRADE_FROM)) && label=$$(git rev-parse --short $(UPGRADE_FROM)) && \
		KUBEBUILDER_ASSETS=$$assets CAPI_ASSETS=$$capi $(GO) run ./test/bench -n $(N) -runs=1 -upgrade-from=$$from -upgrade-from-label="$$label" $(BENCH_FLAGS) && \
		KUBEBUILDER_ASSETS=$$assets CAPI_ASSETS=$$capi $(GO) run ./test/bench -n $(N) -runs=4 -only='cluster api' -upgrade-from=$$from -upgrade-from-label="$$label" $(BENCH_FLAGS)

.PHONY: bench-upgrade-published
bench-upgrade-published: ## Optional, not in CI: N MachineRequests run by the published provider (PUBLISHED_COMMIT), then upgraded to this one: its VMs adopted by label patches, the time until every machine is observed again.
	@$(CONTROLPLANE_ASSETS) && \
		published=$$(PUBLISHED_COMMIT=$(PUBLISHED_COMMIT) bash hack/tools/published-provider.sh) && \
		KUBEBUILDER_ASSETS=$$assets $(GO) run ./test/bench -n $(N) -runs=1 -schema=butler-api-v0.13.0 -legacy-image-storage-class-names \
			-upgrade-from=$$published -upgrade-from-published -upgrade-from-label="the published provider $(PUBLISHED_COMMIT)" $(BENCH_FLAGS)

.PHONY: test-chaos
test-chaos: ## 200 machines, 11 SIGKILLs of the manager, Harvester API errors, hangs, conflicts and lost responses; nothing lost, duplicated, recreated, orphaned or leaked; deletions that finish although Harvester watches never answer.
	@$(CONTROLPLANE_ASSETS) && \
		KUBEBUILDER_ASSETS=$$assets $(GO) test -tags chaos -count=1 -timeout=20m -v ./test/chaos/

##@ Build

.PHONY: build
build: ## Build the manager binary (static).
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o bin/manager ./cmd/manager

.PHONY: run
run: ## Run the manager against the cluster of the current kubeconfig.
	$(GO) run ./cmd/manager --log-format=text

VERSION ?= v0.3.0
# The published provider released v0.1.0 to v0.2.3 (images, tags): releases of this one start
# above, so that no version names two different programs.
FIRST_VERSION := v0.3.0
.PHONY: release-artifacts
release-artifacts: ## dist/: the Helm chart package and install.yaml (kustomize) for VERSION (vX.Y.Z, from v0.3.0).
	@echo "$(VERSION)" | grep -Eq '^v[0-9]+\.[0-9]+\.[0-9]+$$' || { echo "VERSION=$(VERSION) is not vX.Y.Z"; exit 1; }
	@[ "$$(printf '%s\n' $(FIRST_VERSION) $(VERSION) | sort -V | head -n 1)" = $(FIRST_VERSION) ] || \
		{ echo "VERSION=$(VERSION) is below $(FIRST_VERSION): v0.1.0 to v0.2.3 are the published provider's releases"; exit 1; }
	rm -rf dist && mkdir -p dist
	$(HELM) package $(CHART) --version $(patsubst v%,%,$(VERSION)) --app-version $(VERSION) --destination dist
	$(KUSTOMIZE) build config/default | sed 's|ghcr.io/butlerdotdev/butler-provider-harvester:v[0-9.]*|ghcr.io/butlerdotdev/butler-provider-harvester:$(VERSION)|' > dist/install.yaml

.PHONY: infrastructure-components
infrastructure-components: ## dist/clusterctl/: infrastructure-components.yaml (kustomize config/clusterctl), metadata.yaml, the cluster templates, the ClusterClasses and the opt-in steward-rbac.yaml (config/steward), for a clusterctl repository of VERSION.
	@echo "$(VERSION)" | grep -Eq '^v[0-9]+\.[0-9]+\.[0-9]+$$' || { echo "VERSION=$(VERSION) is not vX.Y.Z"; exit 1; }
	rm -rf dist/clusterctl && mkdir -p dist/clusterctl
	$(KUSTOMIZE) build config/clusterctl | sed 's|ghcr.io/butlerdotdev/butler-provider-harvester:v[0-9.]*|ghcr.io/butlerdotdev/butler-provider-harvester:$(VERSION)|' > dist/clusterctl/infrastructure-components.yaml
	$(KUSTOMIZE) build config/steward > dist/clusterctl/steward-rbac.yaml
	cp metadata.yaml templates/cluster-template*.yaml templates/clusterclass-*.yaml dist/clusterctl/

.PHONY: docker-build
docker-build: ## Build the container image (needs a Docker engine).
	docker build -t $(IMG) .

##@ Deployment (use the cluster of the current kubeconfig; need kubectl)

.PHONY: install
install: manifests ## Install the CRDs.
	kubectl apply --server-side -f config/crd/bases

.PHONY: uninstall
uninstall: ## Remove the CRDs (and with them every MachineRequest and ProviderConfig).
	kubectl delete --ignore-not-found -f config/crd/bases

.PHONY: deploy
deploy: manifests ## Deploy the controller with kustomize (config/default: the released image, or make deploy IMG=<your image>).
	$(KUSTOMIZE) build config/default \
		| $(if $(filter command line environment,$(origin IMG)),sed 's|ghcr.io/butlerdotdev/butler-provider-harvester:v[0-9.]*|$(IMG)|',cat) \
		| kubectl apply --server-side -f -

KUSTOMIZE_PREFIX := butler-provider-harvester
.PHONY: undeploy
undeploy: ## Remove the controller deployed by make deploy. The CRDs (and so every MachineRequest) stay: make uninstall removes them.
	kubectl -n butler-system delete --ignore-not-found deployment/$(KUSTOMIZE_PREFIX)-controller-manager \
		service/$(KUSTOMIZE_PREFIX)-controller-manager-metrics serviceaccount/$(KUSTOMIZE_PREFIX)-controller-manager \
		role/$(KUSTOMIZE_PREFIX)-leader-election-role rolebinding/$(KUSTOMIZE_PREFIX)-leader-election-rolebinding
	kubectl delete --ignore-not-found clusterrole/$(KUSTOMIZE_PREFIX)-manager-role clusterrole/$(KUSTOMIZE_PREFIX)-metrics-reader \
		clusterrolebinding/$(KUSTOMIZE_PREFIX)-manager-rolebinding

.PHONY: helm-install
helm-install: ## Install or upgrade the Helm chart into namespace butler-system (HELM_FLAGS for --set ...).
	$(HELM) upgrade --install butler-provider-harvester $(CHART) --namespace butler-system --create-namespace $(HELM_FLAGS)
