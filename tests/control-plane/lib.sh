# Shared by build, up and down. Sourced, not executed.
# shellcheck shell=bash

CP_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
KUBERNETES_VERSION="$(cat "$CP_DIR/KUBERNETES_VERSION")"
# Where built binaries are cached: outside the work tree by default, so every clone on a machine
# (CI clones afresh) shares them. A binary is named NAME-KEY, KEY hashing its module's go.mod,
# go.sum and main.go, the Go version and the link flags: a second build rebuilds nothing, any
# change rebuilds just that program, and clones at different versions do not mix binaries.
if [[ -n "${WEFT_CONTROL_PLANE_BIN:-}" ]]; then
  CP_BIN="$WEFT_CONTROL_PLANE_BIN"
elif [[ -n "${XDG_CACHE_HOME:-}" || -n "${HOME:-}" ]]; then
  CP_BIN="${XDG_CACHE_HOME:-$HOME/.cache}/weft/control-plane"
else
  CP_BIN="$CP_DIR/.bin"
fi
# Go build parallelism: the machine has 2 cores shared with cargo.
CP_GO_P="${WEFT_CONTROL_PLANE_GO_P:-2}"

# The programs: binary name -> module directory.
CP_PROGRAMS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
cp_module_dir() {
  case "$1" in
    etcd) echo etcd ;;
    kube-apiserver) echo apiserver ;;
    kube-controller-manager) echo controller-manager ;;
    kube-scheduler) echo scheduler ;;
    kwok) echo kwok ;;
    *) return 1 ;;
  esac
}

cp_die() { echo "control-plane: $*" >&2; exit 1; }
cp_log() { echo "control-plane: $*" >&2; }

cp_ldflags() {
  local name="$1" v="$KUBERNETES_VERSION" major minor
  major="${v#v}"; major="${major%%.*}"
  minor="${v#v*.}"; minor="${minor%%.*}"
  local f="-s -w"
  case "$name" in
    kube-*)
      f+=" -X k8s.io/component-base/version.gitVersion=$v"
      f+=" -X k8s.io/component-base/version.gitMajor=$major"
      f+=" -X k8s.io/component-base/version.gitMinor=$minor"
      f+=" -X k8s.io/component-base/version.gitTreeState=clean"
      f+=" -X k8s.io/client-go/pkg/version.gitVersion=$v"
      f+=" -X k8s.io/client-go/pkg/version.gitMajor=$major"
      f+=" -X k8s.io/client-go/pkg/version.gitMinor=$minor"
      ;;
  esac
  echo "$f"
}


cp_key() {
  local name="$1" dir
  dir="$CP_DIR/$(cp_module_dir "$name")"
  { cat "$dir/go.mod" "$dir/go.sum" "$dir/main.go"; go env GOVERSION; cp_ldflags "$name"; } \
    | sha256sum | cut -c1-16
}

# cp_bin NAME: path of NAME's binary for the current sources (it may not be built yet).
cp_bin() {
  echo "$CP_BIN/$1-$(cp_key "$1")"
}

# cp_build NAME: build one program into $CP_BIN unless the binary for these sources is there.
cp_build() {
  local name="$1" dir out log start
  dir="$CP_DIR/$(cp_module_dir "$name")" || cp_die "unknown program $name"
  out="$(cp_bin "$name")"
  [[ -x "$out" ]] && return 0
  mkdir -p "$CP_BIN"
  log="$CP_BIN/$name.build.log"
  cp_log "building $name (module $dir, log $log) ..."
  start=$SECONDS
  # kube-apiserver alone takes minutes on a cold cache: a line every 30 s on stderr instead of
  # silence (`go build -v` lists each package it compiles in the log, counted here).
  (while sleep 30 && kill -0 $$ 2>/dev/null; do
    cp_log "still building $name: $((SECONDS - start))s, $(wc -l <"$log") packages so far"
  done) &
  local ticker=$!
  if ! (cd "$dir" && CGO_ENABLED=0 go build -v -p "$CP_GO_P" -mod=readonly -trimpath -buildvcs=false \
        -ldflags "$(cp_ldflags "$name")" -o "$out.tmp" .) >"$log" 2>&1; then
    kill "$ticker" 2>/dev/null || true
    tail -n 30 "$log" >&2
    cp_die "step 'build $name' failed; read $log"
  fi
  kill "$ticker" 2>/dev/null || true
  mv -f "$out.tmp" "$out"
  # Older builds of this program (other sources) only take space: ~30-100 MB each.
  find "$CP_BIN" -maxdepth 1 -name "$name-*" ! -path "$out" -delete 2>/dev/null || true
  cp_log "built $name in $((SECONDS - start))s"
}

# cp_build_all [NAMES...]: build under a lock so concurrent `up`s (parallel test binaries) build once.
cp_build_all() {
  local names=("$@")
  ((${#names[@]})) || names=("${CP_PROGRAMS[@]}")
  command -v go >/dev/null || cp_die "step 'build': go is not installed (run tests/control-plane/ensure-deps)"
  mkdir -p "$CP_BIN"
  exec 9>"$CP_BIN/.lock"
  flock 9
  local n
  for n in "${names[@]}"; do cp_build "$n"; done
  flock -u 9
  exec 9>&-
}
