#!/usr/bin/env bash
# Two "hosts" on one machine: two network namespaces joined by a veth pair,
# mpirun in the first launching the second rank in the second through a
# launch agent (instead of ssh), the ranks talking TCP over the veth.
#   netns_two_hosts.sh PARSPEC TARGET DRAFT
# Prints the generated token ids (JSON) on success; exits 77 with a reason
# when the machine does not allow it (not root, no `ip netns`).
set -u
parspec=$(realpath "$1") target=$(realpath "$2") draft=$(realpath "$3")
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
command -v ip > /dev/null || skip "no 'ip' command (iproute2)"
command -v mpirun > /dev/null || skip "no mpirun"
tag="ps$$"
a="${tag}a" b="${tag}b"
cleanup() { ip netns del "$a" 2> /dev/null; ip netns del "$b" 2> /dev/null; rm -rf "$work"; }
work=$(mktemp -d)
trap cleanup EXIT
ip netns add "$a" 2> "$work/err" || skip "ip netns add failed: $(cat "$work/err")"
ip netns add "$b" || skip "ip netns add failed"
ip link add "${tag}va" type veth peer name "${tag}vb" 2> "$work/err" ||
  skip "cannot create a veth pair: $(cat "$work/err")"
ip link set "${tag}va" netns "$a" && ip link set "${tag}vb" netns "$b" || skip "cannot move veth"
ip -n "$a" addr add 10.231.0.1/24 dev "${tag}va" && ip -n "$b" addr add 10.231.0.2/24 dev "${tag}vb"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "${tag}va" up && ip -n "$b" link set "${tag}vb" up
# The launch agent mpirun uses instead of ssh: "agent HOST COMMAND..." runs
# COMMAND inside HOST's namespace.
cat > "$work/agent" << AGENT
#!/bin/sh
host=\$1; shift
case "\$host" in 10.231.0.2) ns=$b ;; *) ns=$a ;; esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
AGENT
chmod +x "$work/agent"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ip netns exec "$a" mpirun -np 2 --host 10.231.0.1:1,10.231.0.2:1 \
  --mca plm_rsh_agent "$work/agent" \
  --mca btl tcp,self --mca btl_tcp_if_include 10.231.0.0/24 --mca oob_tcp_if_include 10.231.0.0/24 \
  -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
  "$parspec" generate -m "$target" -md "$draft" --strategy pipedec -p "Once upon a time" -n 24 \
  --temp 0 --json -t 1
