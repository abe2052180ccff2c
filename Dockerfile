# Build: docker build -t relay .
# Run:   docker run --rm -v $PWD/relay.yaml:/etc/relay/relay.yaml relay serve --config /etc/relay/relay.yaml
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/relay ./cmd/relay

# A static binary on a minimal base that runs as a non-root user (uid 65532).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/relay /usr/local/bin/relay
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/relay"]
CMD ["serve", "--config", "/etc/relay/relay.yaml"]
