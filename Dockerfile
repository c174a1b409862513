# Multi-stage build of the manager: a static binary (CGO_ENABLED=0) on distroless, running as
# nonroot with a read-only root filesystem (it writes nothing; the metrics certificate, if
# self-signed, stays in memory). test/deploy replays the build stage below (its COPYs and build
# line, with and without REPO_DIR) and checks the result is static.
FROM --platform=$BUILDPLATFORM golang:1.26.8 AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
# Where this repository is in the build context: "." (or empty) when the context is the
# repository (`make docker-build`); its directory name when the context is the directory above,
# as the Butler CLI's local mode builds it:
#   docker build -f <root>/<repo>/Dockerfile --build-arg REPO_DIR=<repo> <root>
ARG REPO_DIR=.
WORKDIR /src
COPY ${REPO_DIR}/go.mod ${REPO_DIR}/go.sum ./
RUN go mod download
COPY ${REPO_DIR}/api/ api/
COPY ${REPO_DIR}/cmd/manager/ cmd/manager/
COPY ${REPO_DIR}/internal/ internal/
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags='-s -w' -o /manager ./cmd/manager

FROM gcr.io/distroless/static:nonroot
COPY --from=build /manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
