#!/usr/bin/env bash
# Resume every sweep in progress, one after another, in the order results/in-progress/queue.txt lists them
# ("SUITE OUT [FLAGS]" per line; FLAGS: `tune` runs `normbench tune` instead of `run`, `gpu-only` marks a sweep too
# slow for a CPU, skipped here; '#' starts a comment). Each runs niced on one thread per worker, so the machine's own
# tests and CI keep the cores they ask for; a finished sweep costs one ledger read. SIGTERM (or Ctrl-C) is passed to
# the run in flight, which checkpoints and gives its claims back (exit 143); nothing after it starts.
#   nohup bash scripts/resume-in-progress.sh > /tmp/sweeps.log 2>&1 &
# Env: WORKERS (default 2), NICE (default 10), EXTRA (more flags for every `normbench run`, e.g. "--fuse 8").
set -uo pipefail
cd "$(dirname "$0")/.."
queue=results/in-progress/queue.txt
[ -f "$queue" ] || { echo "resume-in-progress.sh: $queue is missing: nothing is in progress" >&2; exit 2; }
normbench=${NORMBENCH:-.venv/bin/normbench}
child=0
trap 'if [ "$child" != 0 ]; then kill -TERM "$child" 2>/dev/null; wait "$child"; fi; exit 143' TERM INT HUP
while read -r suite out flags; do
  case "$suite" in ''|'#'*) continue ;; esac
  case " ${flags:-} " in *" gpu-only "*) echo "== $suite: gpu-only, skipped here"; continue ;; esac
  command=run
  case " ${flags:-} " in *" tune "*) command=tune ;; esac
  echo "== $(date -u +%FT%TZ) $command $suite -> $out"
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 nice -n "${NICE:-10}" "$normbench" "$command" "$suite" --out "$out" --workers "${WORKERS:-2}" \
    ${EXTRA:-} &
  child=$!
  wait "$child"
  rc=$?
  child=0
  echo "== $(date -u +%FT%TZ) $suite: exit $rc"
  [ "$rc" = 143 ] && exit 143
done < "$queue"
