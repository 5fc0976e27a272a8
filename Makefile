# Herald — make targets. `make help` lists them.
GO        ?= go
PKGS      ?= ./...
# -timeout bounds each package's test binary: a failure bound well above
# what a busy machine needs (cmd/herald's took 12.5 minutes under a load
# average of 15), not a budget.
GOFLAGS_TEST ?= -race -count=1 -timeout 20m
STATICCHECK_VERSION ?= v0.8.2
# VERSION is stamped into the binary (herald version); a tag such as v0.1.0
# on a release commit, else the commit and -dirty (docs/release.md).
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
CONTAINER ?= $(shell command -v podman 2>/dev/null || echo docker)
# make install puts bin/herald in $(DESTDIR)$(PREFIX)/bin.
PREFIX    ?= /usr/local

.PHONY: help run build install build-static image test test-js test-browser lint fuzz bench bench-outbox bench-webhook soak-outbox clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | sort

run: build ## run Herald on the embedded SQLite store and the in-memory broker
	bin/herald serve

build: ## build bin/herald, stamped with VERSION (git describe)
	@echo "building bin/herald (the first build compiles the embedded SQLite driver once: a few minutes)"
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/herald ./cmd/herald

install: build ## copy bin/herald to $(DESTDIR)$(PREFIX)/bin (PREFIX defaults to /usr/local; PREFIX="$HOME/.local" for your user)
	install -d "$(DESTDIR)$(PREFIX)/bin"
	install -m 0755 bin/herald "$(DESTDIR)$(PREFIX)/bin/herald"

build-static: ## build bin/herald-<os>-<arch> as the container image does: static, no cgo, stripped
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o bin/herald-$$($(GO) env GOOS)-$$($(GO) env GOARCH) ./cmd/herald

image: ## build the container image herald:VERSION (deploy/container/Containerfile) with podman or docker
	$(CONTAINER) build -f deploy/container/Containerfile --build-arg VERSION=$(VERSION) -t herald:$(VERSION) .

test: ## start/install PostgreSQL and Redis if needed, then run every test with -race
	bash scripts/test-services.sh
	$(GO) vet $(PKGS)
	$(GO) test $(GOFLAGS_TEST) $(PKGS)
	@if [ -f clientjs/package.json ]; then $(MAKE) --no-print-directory test-js && $(MAKE) --no-print-directory test-browser; fi

test-js: ## the JS client's tests (node --test) against a Herald built from this tree
	bash scripts/test-js.sh

test-browser: ## the JS client's tests in headless Chromium (installs chromium and playwright-core if missing)
	bash scripts/test-browser.sh

lint: ## gofmt, go vet and staticcheck (pinned)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

fuzz: ## run each fuzz target for FUZZTIME (default 20s)
	bash scripts/fuzz.sh $${FUZZTIME:-20s}

bench: ## benchmarks (numbers go to docs/performance.md)
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

bench-outbox: ## outbox drain rate, commit→accept latency, producer commit rate (loadtest/outboxbench; ~2 min)
	$(GO) run ./loadtest/outboxbench

bench-webhook: ## webhook handler: throughput beside a bare net/http client, realtime with it beside (scripts/bench-webhook.sh; ~3 min)
	bash scripts/bench-webhook.sh

soak-outbox: ## the outbox's model-based test, seed after seed, on both stores for SOAK (default 10m) each
	bash scripts/soak-outbox.sh

clean: ## remove build output and the local data directory
	rm -rf bin herald-data
