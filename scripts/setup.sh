#!/usr/bin/env bash
# Installs every Debian 12 package the build, the tests and the demo need.
# Idempotent: apt-get skips what is already installed; run as root (or via sudo).
set -euo pipefail
packages=(
  build-essential cmake pkg-config ninja-build
  libboost-program-options-dev libboost-dev      # program_options; Asio + Beast are header-only in libboost-dev
  libyaml-cpp-dev libhwloc-dev liburing-dev libpcre2-dev nlohmann-json3-dev libsystemd-dev
  libgtest-dev libgmock-dev
  clang libclang-rt-14-dev                      # libFuzzer target for the GGUF reader
  fio numactl systemd curl jq util-linux procps
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "setup: all ${#packages[@]} packages present"
