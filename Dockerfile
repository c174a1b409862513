# Multi-stage build of the manager: a static binary (CGO_ENABLED=0) on distroless, running as
# nonroot with a read-only root filesystem (it writes nothing; the metrics certificate, if
# self-signed, stays in memory). test/deploy runs the build line below and checks the result is static.
FROM --platform=$BUILDPLATFORM golang:1.26.8 AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/manager/ cmd/manager/
COPY internal/ internal/
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags='-s -w' -o /manager ./cmd/manager

FROM gcr.io/distroless/static:nonroot
COPY --from=build /manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
