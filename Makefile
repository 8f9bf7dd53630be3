# agent-sandbox build, images, tests and install.
# `make check` (as root on a host prepared by hack/setup-test-host) runs every test.

GO      ?= go
PODMAN  ?= podman
VERSION ?= dev
# A release build names the registry its tagged images are pulled from.
REGISTRY ?=
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null)
PREFIX  ?= /usr/local
DESTDIR ?=
GO_TAGS := remote exclude_graphdriver_btrfs containers_image_openpgp

BASE               ?= docker.io/library/debian:trixie-slim
SANDBOX_IMAGE      ?= localhost/agent-sandbox:dev
ROUTER_IMAGE       ?= localhost/agent-sandbox-router:dev
FAKEUPSTREAM_IMAGE ?= localhost/agent-sandbox-fakeupstream:test

# A tree without commits (or a copy without .git) must still build.
export GOFLAGS ?= -buildvcs=false

# Images must land in the storage of the rootless user who runs sessions. Root
# can't run containers on the test hosts, so there root builds as asbtest.
IMAGE_USER ?= $(shell [ "$$(id -u)" = 0 ] && id -u asbtest >/dev/null 2>&1 && echo asbtest)

# The image binaries are static so the Debian base needs no Go runtime bits;
# -trimpath keeps them byte-identical across clones, so image layers cache.
STATIC_BUILD = CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w"

# The sandbox and router images are built by the launcher itself, from the
# Containerfiles embedded in it and through its own podman service: the code
# path of a user's first run. It passes the host's CA bundle to the build
# steps that download over TLS (npm), as a build secret.
ASB_BUILD_ENV = AGENT_SANDBOX_BASE_IMAGE=$(BASE) AGENT_SANDBOX_IMAGE=$(SANDBOX_IMAGE) \
	AGENT_SANDBOX_ROUTER_IMAGE=$(ROUTER_IMAGE) AGENT_SANDBOX_PODMAN=$(PODMAN)

# asb_build ROLE (router or sandbox); podman_build CONTEXT,TAG[,EXTRA ARGS].
# For IMAGE_USER the binary or the context is copied to a world-readable
# place first: a clone under /root is 0700.
ifeq ($(IMAGE_USER),)
asb_build = $(ASB_BUILD_ENV) bin/agent-sandbox build --only $(1)
podman_build = $(PODMAN) build --pull=missing $(3) -t $(2) $(1)
else
asb_build = @echo "agent-sandbox build --only $(1) (as $(IMAGE_USER))"; \
	set -e; stage=$$(mktemp -d /var/tmp/agent-sandbox-build.XXXXXX); \
	trap 'rm -rf "$$stage"' EXIT; \
	install -m 0755 bin/agent-sandbox "$$stage/agent-sandbox"; chmod 0755 "$$stage"; cd "$$stage"; \
	uid=$$(id -u $(IMAGE_USER)); \
	[ -d /run/user/$$uid ] || install -d -m 0700 -o $(IMAGE_USER) -g "$$(id -g $(IMAGE_USER))" /run/user/$$uid; \
	runuser -u $(IMAGE_USER) -- env -i HOME="$$(getent passwd $(IMAGE_USER) | cut -d: -f6)" \
		USER=$(IMAGE_USER) PATH=/usr/local/go/bin:/usr/bin:/bin XDG_RUNTIME_DIR=/run/user/$$uid \
		$(ASB_BUILD_ENV) "$$stage/agent-sandbox" build --only $(1)

podman_build = @echo "podman build -t $(2) $(1) (as $(IMAGE_USER))"; \
	set -e; stage=$$(mktemp -d /var/tmp/agent-sandbox-build.XXXXXX); \
	trap 'rm -rf "$$stage"' EXIT; \
	cp -R $(1)/. "$$stage"; chmod -R a+rX "$$stage"; cd "$$stage"; \
	runuser -u $(IMAGE_USER) -- env -i HOME="$$(getent passwd $(IMAGE_USER) | cut -d: -f6)" \
		USER=$(IMAGE_USER) PATH=/usr/local/go/bin:/usr/bin:/bin \
		XDG_RUNTIME_DIR=/run/user/$$(id -u $(IMAGE_USER)) \
		$(PODMAN) build --pull=missing $(3) -t $(2) "$$stage"
endif

.PHONY: all build bins images image-router image-sandbox e2e-bins e2e-images image-fakeupstream \
	test e2e check install clean

all: build

# The router's helpers are embedded in the binary, which builds the images.
build: bins
	$(GO) build -tags "$(GO_TAGS)" -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.registry=$(REGISTRY)" -o bin/agent-sandbox .

bins:
	$(STATIC_BUILD) -tags "$(GO_TAGS)" -o router-image/forwarder.bin ./forwarder
	$(STATIC_BUILD) -tags "$(GO_TAGS)" -o router-image/routerd.bin ./router-image/routerd

# Separate targets so `make -j` can overlap the builds.
images: image-router image-sandbox

image-router: build
	$(call asb_build,router)

image-sandbox: build
	$(call asb_build,sandbox)

e2e-bins:
	$(STATIC_BUILD) -tags "e2e $(GO_TAGS)" -o e2e/fakeupstream/fakeupstream.bin ./e2e/fakeupstream

# The recipes' images (README: Other agents), built as the README says, on
# the agent image. Built here rather than by the tests: their npm step
# reaches the npm registry, and no test reaches a real host.
RECIPES := codex gemini
HOST_CA := /etc/ssl/certs/ca-certificates.crt
comma := ,
RECIPE_ARGS = --build-arg BASE=$(SANDBOX_IMAGE) $(if $(wildcard $(HOST_CA)),--secret id=hostca$(comma)src=$(HOST_CA))

e2e-images: image-fakeupstream $(addprefix image-recipe-,$(RECIPES))

image-recipe-%: image-sandbox
	$(call podman_build,recipes/$*,localhost/agent-sandbox-$*:test,$(RECIPE_ARGS))

image-fakeupstream: e2e-bins
	$(call podman_build,e2e/fakeupstream,$(FAKEUPSTREAM_IMAGE))

test:
	$(GO) test -tags "$(GO_TAGS)" -count=1 ./...

e2e:
	GO="$(GO)" GO_TAGS="$(GO_TAGS)" MAKE="$(MAKE)" bash hack/run-e2e

# The same suite on podman 5, in a Debian 13 root filesystem (issue 7).
.PHONY: e2e-podman5
e2e-podman5:
	GO="$(GO)" GO_TAGS="$(GO_TAGS)" MAKE="$(MAKE)" bash hack/podman5/run-e2e

check:
	$(MAKE) test
	$(MAKE) e2e
	$(MAKE) e2e-podman5

# No build dependency: `sudo make install` must not rebuild as root.
install:
	@test -x bin/agent-sandbox || { echo "bin/agent-sandbox is missing: run make build first" >&2; exit 1; }
	install -D -m 0755 bin/agent-sandbox $(DESTDIR)$(PREFIX)/bin/agent-sandbox
	install -D -m 0644 allowed-hosts $(DESTDIR)/usr/share/agent-sandbox/allowed-hosts

clean:
	rm -rf bin router-image/forwarder.bin router-image/routerd.bin e2e/fakeupstream/fakeupstream.bin
