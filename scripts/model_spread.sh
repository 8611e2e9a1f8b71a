#!/usr/bin/env bash
# How reproducible the stored GPU measurements are (docs/model.md, "How far the measurements
# agree"): for each deck family that the leave-one-out leaves out together (--group in
# scripts/model_pairs.sh: one deck on one machine, measured in several sessions),
# `ulysses-post spread` over its reports: the same run's layer median in each, and largest /
# smallest. No model of that machine can predict those runs closer than they agree.
#   ./scripts/model_spread.sh [--format table|csv|json|markdown]
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/postprocess${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's ulysses_post
# shellcheck disable=SC2034  # read by model_pairs.sh: the trace paths, not used here
T=unused
# shellcheck source=scripts/model_pairs.sh disable=SC1091  # linted on its own
. scripts/model_pairs.sh
declare -A members=()
names=()
for ((i = 0; i < ${#PAIRS[@]}; i++)); do
  [[ ${PAIRS[i]} == --group ]] || continue
  report=${PAIRS[i + 1]%=*} name=${PAIRS[i + 1]##*=}
  [[ -v members[$name] ]] || names+=("$name")
  members[$name]+="$report "
done
for name in "${names[@]}"; do
  read -r -a reports <<<"${members[$name]}"
  ((${#reports[@]} >= 2)) || continue
  echo "== $name: ${#reports[@]} reports"
  python3 -m ulysses_post spread "${reports[@]}" "$@"
  echo
done
