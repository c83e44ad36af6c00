#!/usr/bin/env bash
# Installs Debian's OpenSSH server and client for the SSH runner's tests (tests/test_ssh_runner.py).
# The tests start their own sshd on 127.0.0.1 with a throwaway config and keys; this script only
# installs the binaries and never starts or enables the system's sshd service.
# Idempotent: does nothing when /usr/sbin/sshd, ssh and ssh-keygen are already there.
set -euo pipefail

if [ -x /usr/sbin/sshd ] && command -v ssh >/dev/null && command -v ssh-keygen >/dev/null; then
  exit 0
fi
SUDO=()
[ "$(id -u)" -eq 0 ] || SUDO=(sudo)
"${SUDO[@]}" apt-get update -qq
# policy-rc.d 101: the package's postinst must not start the system sshd in a container/CI job
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee /usr/sbin/policy-rc.d >/dev/null
  "${SUDO[@]}" chmod +x /usr/sbin/policy-rc.d
  trap '"${SUDO[@]}" rm -f /usr/sbin/policy-rc.d' EXIT
fi
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends \
  openssh-server openssh-client procps util-linux >/dev/null
"${SUDO[@]}" mkdir -p /run/sshd
/usr/sbin/sshd -V 2>&1 | head -n 1 || true
