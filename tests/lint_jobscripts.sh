#!/usr/bin/env bash
# Lints every shell script users run: `bash -n` (syntax) and shellcheck (every finding,
# style included) over jobscripts/*.sh, jobscripts/*.sbatch, scripts/*.sh, inputs/*.sh,
# tests/*.sh (this one), tests/*/*.sh and .ci/run. Exits 1 naming each script with a
# finding, and 2 when the shellcheck program is missing.
#
#   tests/lint_jobscripts.sh          # from anywhere
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v shellcheck >/dev/null; then
  echo "lint_jobscripts.sh: shellcheck not found (apt-get install shellcheck; ./scripts/setup.sh does)" >&2
  exit 2
fi

shopt -s nullglob
scripts=(jobscripts/*.sh jobscripts/*.sbatch scripts/*.sh inputs/*.sh tests/*.sh tests/*/*.sh)
if [[ -f .ci/run ]]; then scripts+=(.ci/run); fi
if ((${#scripts[@]} == 0)); then
  echo "lint_jobscripts.sh: no scripts found" >&2
  exit 2
fi

bad=()
for f in "${scripts[@]}"; do
  ok=1
  bash -n "$f" || ok=0
  # Every script here is bash; saying so covers .sbatch files whatever their first line.
  shellcheck --shell=bash "$f" || ok=0
  if ((ok == 0)); then bad+=("$f"); fi
done

if ((${#bad[@]} > 0)); then
  echo "lint_jobscripts.sh: findings in ${bad[*]}" >&2
  exit 1
fi
echo "lint_jobscripts.sh: ${#scripts[@]} scripts clean (bash -n, shellcheck $(shellcheck --version | sed -n 's/^version: //p'))"
