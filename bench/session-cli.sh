#!/bin/bash
# One agent-sandbox session done step by step with the podman CLI: T_cli,
# the baseline of issue 5. It is what a careful shell script would do, one
# command after another: an internal session network, the router on it and
# on the egress network, a pod with the loopback forwarder, the agent running
# its command, then teardown. Readiness is the helpers' own ready lines, as
# for the launcher.
#
# Run it as the rootless user from the launch directory, with the images,
# the egress network and the home volume present:
#   CONF_DIR=DIR bench/session-cli.sh [CMD...]        (CMD defaults to true)
# DIR holds the files a real session generated for its router and forwarder
# (dnsmasq.conf, nginx.conf, forwards), with @ROUTER_IP@ where the router's
# address goes; bench/run captures them from a running session. A
# forwards.env there instead holds FORWARDS for forwarders that take them
# from the environment.
# The images, home volume and upstream DNS come from the same AGENT_SANDBOX_*
# variables the launcher reads. Exits with the command's status.
set -euo pipefail

die() {
	printf 'session-cli: %s\n' "$*" >&2
	exit 1
}

: "${CONF_DIR:?set CONF_DIR to a directory with dnsmasq.conf, nginx.conf and forwards (bench/run makes one)}"
for f in dnsmasq.conf nginx.conf; do
	[ -r "$CONF_DIR/$f" ] || die "$CONF_DIR/$f is missing: let bench/run capture it from a session"
done
[ -r "$CONF_DIR/forwards" ] || [ -r "$CONF_DIR/forwards.env" ] ||
	die "$CONF_DIR has neither forwards nor forwards.env: let bench/run capture them from a session"
: "${XDG_RUNTIME_DIR:?XDG_RUNTIME_DIR is not set: rootless podman needs it}"
IMAGE=${AGENT_SANDBOX_IMAGE:-localhost/agent-sandbox:dev}
ROUTER_IMAGE=${AGENT_SANDBOX_ROUTER_IMAGE:-localhost/agent-sandbox-router:dev}
HOME_VOLUME=${AGENT_SANDBOX_HOME_VOLUME:-agent-sandbox-home}
EGRESS=agent-sandbox-egress
LABEL=asb-bench.role=session-cli

name=asb-cli-$(date +%s)-$$
tmp=
# shellcheck disable=SC2317 # called by the trap
teardown() {
	podman pod rm -f -t 0 "$name" >/dev/null 2>&1 || true
	podman rm -f -t 0 "$name-router" >/dev/null 2>&1 || true
	podman network rm -f "$name" >/dev/null 2>&1 || true
	[ -z "$tmp" ] || rm -rf "$tmp"
}
trap teardown EXIT

# wait_ready polls a helper's log for its ready line, as a script must.
wait_ready() {
	local i out
	for ((i = 0; i < 200; i++)); do
		out=$(podman logs "$1" 2>&1) || true
		[[ $out == *"$2"* ]] && return 0
		sleep 0.02
	done
	die "$1 never said '$2'; its log: $out"
}

podman network create --internal --disable-dns --opt mtu=65520 --label "$LABEL" "$name" >/dev/null
subnet=$(podman network inspect "$name" --format '{{range .Subnets}}{{.Subnet}}{{end}}')
[[ $subnet == *.0/24 ]] || die "session network got $subnet, want an IPv4 /24"
rip=${subnet%.0/24}.2

tmp=$(mktemp -d "$XDG_RUNTIME_DIR/$name.XXXXXX")
for f in "$CONF_DIR"/*; do
	[ "${f##*/}" = forwards.env ] || sed "s/@ROUTER_IP@/$rip/g" "$f" >"$tmp/${f##*/}"
done
chmod 0644 "$tmp"/*
# nginx's TLS server listens on a socket in tls/, which the router mounts
# and the forwarder mounts read-only, as in a session.
mkdir -m 0755 "$tmp/tls"
chmod 0755 "$tmp"
tls=/run/agent-sandbox-tls
forwards=(-v "$tmp:/etc/router:ro,z" -e FORWARDS_FILE=/etc/router/forwards)
if [ -r "$CONF_DIR/forwards.env" ]; then
	forwards=(-e FORWARDS="$(sed "s/@ROUTER_IP@/$rip/g" "$CONF_DIR/forwards.env")")
fi

podman run -d --name "$name-router" --label "$LABEL" --init \
	--network "$name:ip=$rip" --network "$EGRESS" \
	-v "$tmp:/etc/router:ro,z" -v "$tmp/tls:$tls:z" \
	-e UPSTREAM_DNS="${AGENT_SANDBOX_UPSTREAM_DNS:-}" -e UPSTREAM_ALLOW="${AGENT_SANDBOX_UPSTREAM_ALLOW:-}" \
	-e READY_ADDR="$rip" -e TLS_SOCKET="$tls/tls.sock" \
	-e HOST_ADDRS="$(hostname -I | xargs | tr ' ' ,)" \
	"$ROUTER_IMAGE" >/dev/null
wait_ready "$name-router" "routerd: ready"

podman pod create --name "$name" --label "$LABEL" --hostname agent-sandbox \
	--network "$name" --dns "$rip" --no-hosts --userns keep-id:uid=1000,gid=1000 >/dev/null
podman run -d --name "$name-forwarder" --label "$LABEL" --pod "$name" \
	--user 0:0 --read-only --cap-drop all --cap-add NET_BIND_SERVICE \
	--entrypoint /usr/local/bin/forwarder "${forwards[@]}" -v "$tmp/tls:$tls:ro,z" \
	"$ROUTER_IMAGE" >/dev/null
wait_ready "$name-forwarder" "forwarder: ready"

set +e
podman run --rm -i --name "$name-claude" --label "$LABEL" --pod "$name" --init \
	--cap-drop NET_ADMIN,NET_RAW,SYS_ADMIN --security-opt label=disable \
	--device /dev/fuse --device /dev/net/tun \
	-v "$HOME_VOLUME:/home/claude" -v "$PWD:$PWD" -w "$PWD" \
	-e DISABLE_AUTOUPDATER=1 -e CLAUDE_CODE_TMPDIR=/var/tmp \
	"$IMAGE" "${@:-true}"
code=$?
set -e
exit "$code"
