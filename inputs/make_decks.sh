#!/usr/bin/env bash
# Regenerates every shipped deck (inputs/<preset>.h5) from the presets compiled into
# ulysses-ipc, or with --check verifies that the shipped decks agree with them in content.
#
#   ULYSSES_IPC=build/app/ulysses-ipc inputs/make_decks.sh [OUTDIR]    (default: inputs/)
#   ULYSSES_IPC=build/app/ulysses-ipc inputs/make_decks.sh --check [DIR]
#
# The presets live in one table, lib/deck/presets.cpp; this script only runs
# `ulysses-ipc deck new --preset NAME`. --check compares `ulysses-ipc deck show` of a
# fresh deck with that of the shipped one (content, not bytes: HDF5 versions may lay
# out the same content differently) and exits 1 naming every deck that differs, is
# missing, or is shipped without a preset behind it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"

usage() {
  sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

check=0
outdir="$here"
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check=1 ;;
    -h|--help) usage ;;
    -*) echo "make_decks.sh: unknown option '$1'" >&2; usage ;;
    *) outdir="$1" ;;
  esac
  shift
done

bin="${ULYSSES_IPC:-}"
if [ -z "$bin" ]; then
  for cand in "$repo/build/app/ulysses-ipc" "$(command -v ulysses-ipc || true)"; do
    if [ -n "$cand" ] && [ -x "$cand" ]; then bin="$cand"; break; fi
  done
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "make_decks.sh: no ulysses-ipc binary: build it, or set ULYSSES_IPC=path/to/ulysses-ipc" >&2
  exit 2
fi

presets="$("$bin" deck presets --names)"
if [ -z "$presets" ]; then
  echo "make_decks.sh: '$bin deck presets --names' listed no presets" >&2
  exit 2
fi

if [ "$check" -eq 0 ]; then
  mkdir -p "$outdir"
  for p in $presets; do
    "$bin" deck new --preset "$p" -o "$outdir/$p.h5"
  done
  exit 0
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/make_decks.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
bad=()
for p in $presets; do
  "$bin" deck new --preset "$p" -o "$tmp/$p.h5" >/dev/null
  shipped="$outdir/$p.h5"
  if [ ! -f "$shipped" ]; then
    echo "make_decks.sh: $shipped is missing (preset '$p')" >&2
    bad+=("$shipped")
    continue
  fi
  "$bin" deck show "$tmp/$p.h5" >"$tmp/$p.fresh.txt"
  if ! "$bin" deck show "$shipped" >"$tmp/$p.shipped.txt" 2>"$tmp/$p.err"; then
    echo "make_decks.sh: $shipped does not read: $(cat "$tmp/$p.err")" >&2
    bad+=("$shipped")
    continue
  fi
  if ! diff -u --label "$shipped" --label "preset $p" "$tmp/$p.shipped.txt" "$tmp/$p.fresh.txt" >&2; then
    bad+=("$shipped")
  fi
done
# A shipped deck with no preset behind it cannot be regenerated.
shopt -s nullglob
for f in "$outdir"/*.h5; do
  name="$(basename "$f" .h5)"
  if ! grep -qxF -- "$name" <<<"$presets"; then
    echo "make_decks.sh: $f has no preset of that name (presets: ${presets//$'\n'/ })" >&2
    bad+=("$f")
  fi
done

if [ ${#bad[@]} -gt 0 ]; then
  echo "make_decks.sh: differs from the presets: ${bad[*]} (regenerate with inputs/make_decks.sh)" >&2
  exit 1
fi
echo "make_decks.sh: all shipped decks agree with the presets (${presets//$'\n'/ })"
