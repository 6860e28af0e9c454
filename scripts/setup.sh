#!/usr/bin/env bash
# Sets up what slotmover's demo and tests need on a machine with Go, then
# runs one of them:
#
#   bash scripts/setup.sh demo    # then: go run ./cmd/slotmover-lab demo [its flags]
#   bash scripts/setup.sh test    # then: go test -count=1 -timeout 38m ./tests/matrix ./...
#   bash scripts/setup.sh check   # set up only
#
# They start real redis-server processes and run redis-cli. When those are
# missing, Debian's and Ubuntu's redis-server and redis-tools packages are
# installed (as root, or through sudo when it needs no password), unless
# SLOTMOVER_NO_INSTALL=1; otherwise the script stops with the command to
# run. SLOTMOVER_REDIS_SERVER (and SLOTMOVER_REDIS_CLI) point to another
# build instead.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
case "$mode" in
demo | test | check) ;;
*)
	echo "usage: bash scripts/setup.sh demo|test|check" >&2
	exit 2
	;;
esac
if [ $# -gt 1 ] && [ "$mode" != demo ]; then
	echo "scripts/setup.sh: unexpected arguments after $mode (only demo takes flags)" >&2
	exit 2
fi

if ! command -v go >/dev/null; then
	echo "scripts/setup.sh: Go is missing: install Go 1.26 or later (https://go.dev/dl/)" >&2
	exit 2
fi

have_redis() {
	if [ -n "${SLOTMOVER_REDIS_SERVER:-}" ]; then
		[ -x "$SLOTMOVER_REDIS_SERVER" ]
	else
		command -v redis-server >/dev/null && command -v redis-cli >/dev/null
	fi
}

# how_to_install says how this user can run apt-get: "" as root, "sudo",
# or "no" (no apt-get, sudo asks a password, or SLOTMOVER_NO_INSTALL=1).
how_to_install() {
	if [ "${SLOTMOVER_NO_INSTALL:-}" = 1 ] || ! command -v apt-get >/dev/null; then
		echo no
	elif [ "$(id -u)" = 0 ]; then
		echo ""
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
		echo sudo
	else
		echo no
	fi
}

# apt_install runs apt-get (update, install "$@") as how_to_install says.
apt_install() {
	local sudo
	sudo=$(how_to_install)
	echo "+ ${sudo:+sudo }apt-get update && ${sudo:+sudo }apt-get install -y -qq --no-install-recommends $*" >&2
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

if ! have_redis; then
	if [ -n "${SLOTMOVER_REDIS_SERVER:-}" ]; then
		echo "scripts/setup.sh: SLOTMOVER_REDIS_SERVER=$SLOTMOVER_REDIS_SERVER is not an executable file" >&2
		exit 2
	fi
	if ! command -v apt-get >/dev/null; then
		echo "scripts/setup.sh: redis-server and redis-cli are missing: install Redis 7 (its server and cli) with the system's package manager, or set SLOTMOVER_REDIS_SERVER=/path/to/redis-server" >&2
		exit 2
	fi
	if [ "$(how_to_install)" = no ]; then
		echo "scripts/setup.sh: redis-server and redis-cli are missing; install them with:" >&2
		echo "  sudo apt-get update && sudo apt-get install -y -qq --no-install-recommends redis-server redis-tools" >&2
		echo "or set SLOTMOVER_REDIS_SERVER=/path/to/redis-server" >&2
		exit 2
	fi
	apt_install redis-server redis-tools
	if ! have_redis; then
		echo "scripts/setup.sh: redis-server and redis-tools installed, and still no redis-server and redis-cli on the PATH" >&2
		exit 2
	fi
fi
"${SLOTMOVER_REDIS_SERVER:-redis-server}" --version

case "$mode" in
demo) exec go run ./cmd/slotmover-lab demo "${@:2}" ;;
# The compatibility matrix is the longest package by far (about 33 of CI's
# minutes): named first, it starts first, and the others run beside it.
test) exec go test -count=1 -timeout 38m ./tests/matrix ./... ;;
esac
