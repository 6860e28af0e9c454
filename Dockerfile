# The slotmover binary in a small image: docker build -t slotmover .
# Run it as the sidecar of one master (deploy/kubernetes has an example):
#   docker run --network host -e SLOTMOVER_NODE=127.0.0.1:6379 slotmover serve --nats nats://…
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /slotmover ./cmd/slotmover \
 && mkdir /state

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /slotmover /usr/local/bin/slotmover
COPY --from=build --chown=65532:65532 /state /var/lib/slotmover
# The state directory (task records, the lock): a volume, so that a new
# container repairs what the last one left.
ENV SLOTMOVER_STATE_DIR=/var/lib/slotmover
VOLUME /var/lib/slotmover
EXPOSE 7100 7101
ENTRYPOINT ["/usr/local/bin/slotmover"]
CMD ["serve"]
