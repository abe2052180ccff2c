# Build: docker build -t relay:$(cat VERSION) --build-arg VERSION=$(cat VERSION) .
# (the binary takes its version from VERSION itself; the label's default is kept equal to
# it by a test)
# Run:   docker run --rm -v $PWD/relay.yaml:/etc/relay/relay.yaml relay serve --config /etc/relay/relay.yaml
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/relay ./cmd/relay

# A static binary on a minimal base that runs as a non-root user (uid 65532).
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=0.3.0
LABEL org.opencontainers.image.title="relay" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/mercamap/relay"
COPY --from=build /out/relay /usr/local/bin/relay
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/relay"]
CMD ["serve", "--config", "/etc/relay/relay.yaml"]
