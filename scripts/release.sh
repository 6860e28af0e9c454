#!/usr/bin/env bash
# Release archives: bash scripts/release.sh VERSION [OUT]
# builds slotmover for linux/amd64 and linux/arm64 (static, -trimpath, the
# version stamped in as main.version, as the Dockerfile does), packs each
# with the README, docs, deploy files and example configs into
# OUT/slotmover_VERSION_linux_ARCH.tar.gz, and writes OUT/checksums.txt
# (sha256sum's format: sha256sum -c checksums.txt checks them).
# OUT defaults to dist/. deploy/deploy_test.go runs it.
set -euo pipefail
version=${1:?usage: bash scripts/release.sh VERSION [OUT]}
out=${2:-dist}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"
archives=()
for arch in amd64 arm64; do
  name=slotmover_${version}_linux_${arch}
  mkdir -p "$work/$name"
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "-s -w -X main.version=$version" \
    -o "$work/$name/slotmover" ./cmd/slotmover
  cp README.md "$work/$name/"
  cp -r docs deploy configs "$work/$name/"
  rm -f "$work/$name/deploy/"*_test.go
  # Reproducible: fixed owner, order and times.
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work" -czf "$out/$name.tar.gz" "$name"
  archives+=("$name.tar.gz")
done
(cd "$out" && sha256sum "${archives[@]}" > checksums.txt)
echo "release $version: ${archives[*]} and checksums.txt in $out"
