# Small conveniences; the Go tool and docker-compose do the work.
#   make build         static fenced and fencectl in bin/
#   make image         the fenced:dev image (IMAGE=... for another tag)
#   make test          scripts/test.sh: go test -race in every module
#   make compose-up    image + a 3-node cluster (NODES=5 for five)
#   make compose-down  stop it, keeping the data (docker-compose down -v drops it)

GO      ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
IMAGE   ?= fenced:dev
NODES   ?= 3
COMPOSE ?= docker-compose
COMPOSE_FILES = -f docker-compose.yml $(if $(filter 5,$(NODES)),-f docker-compose.5.yml)

.PHONY: build image test compose-up compose-down

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o bin/ ./cmd/fenced ./cmd/fencectl

image:
	PATH="$(dir $(GO)):$$PATH" FENCED_IMAGE=$(IMAGE) scripts/docker-build.sh

test:
	PATH="$(dir $(GO)):$$PATH" scripts/test.sh

compose-up: image
	FENCED_IMAGE=$(IMAGE) $(COMPOSE) $(COMPOSE_FILES) up -d

compose-down:
	$(COMPOSE) $(COMPOSE_FILES) down --remove-orphans
