#!/usr/bin/env bash
# Installs every Debian 12 package the build, the tests and the demo need.
# Idempotent: apt-get skips what is already installed; run as root (or via sudo).
set -euo pipefail
packages=(
  build-essential cmake pkg-config ninja-build
  libboost-program-options-dev libboost-dev      # program_options; Asio + Beast are header-only in libboost-dev
  libyaml-cpp-dev libhwloc-dev liburing-dev libpcre2-dev nlohmann-json3-dev libsystemd-dev
  libxxhash-dev                                 # checksums of the expert store (moestream repack)
  libgtest-dev libgmock-dev
  clang libclang-rt-14-dev                      # libFuzzer target for the GGUF reader
  clang-format                                  # .ci/run checks the code against .clang-format
  fio numactl systemd curl jq util-linux procps
  chromium                                      # the web page's tests run in it, headless
  nftables                                      # nft -c checks the cluster plan's firewall rules
  qemu-user                                     # the cpu-models tests run the kernels as other CPUs (qemu-x86_64 -cpu)
  fuse3 libfuse3-dev                            # faultfs: the disk-fault tests' filesystem (test_disk_faults.cpp)
)
# Node.js runs the official OpenAI/Anthropic SDK clients in the server tests: Debian's, unless a node is
# already on PATH.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)
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
# The SDKs and playwright-core at the versions pinned in tests/node/package-lock.json, into tests/node/node_modules (ignored by git).
here="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -d "$here/tests/node/node_modules/openai" ] || [ ! -d "$here/tests/node/node_modules/@anthropic-ai/sdk" ] ||
   [ ! -d "$here/tests/node/node_modules/playwright-core" ] ||
   [ "$here/tests/node/package-lock.json" -nt "$here/tests/node/node_modules/.package-lock.json" ]; then
  npm ci --prefix "$here/tests/node" --no-audit --no-fund --loglevel=error
fi
echo "setup: SDK test clients in tests/node: openai $(node -p "require('$here/tests/node/node_modules/openai/package.json').version"), @anthropic-ai/sdk $(node -p "require('$here/tests/node/node_modules/@anthropic-ai/sdk/package.json').version")"
