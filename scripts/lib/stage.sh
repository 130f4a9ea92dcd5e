# Sourced by the GPU lease scripts (gpu-lease.sh, gpu-first-contact.sh): one stage of a lease under its own limit.
# stage NAME SECONDS COMMAND...: run COMMAND under a time limit (SIGINT first, so partial results get written; SIGKILL
# KILL_AFTER s later, default 20), add "NAME (exit N)" to the caller's `failed` array when it fails, then call the
# caller's `pack` (what was done goes into $OUT). LIMIT_<NAME>=SECONDS overrides the limit (to fit what is left of a
# lease); STAGES="a b" runs only those. Where the caller defines `left` (the wall time left, in seconds), the limit is
# cut to it and a stage with under 10 s left is skipped and reported.
stage() {
    local name=$1 override="LIMIT_$1"
    local limit=${!override:-$2}
    shift 2
    [[ -z "${STAGES:-}" || " $STAGES " == *" $name "* ]] || return 0
    local budget=""
    if declare -F left >/dev/null; then
        ((limit > $(left))) && limit=$(left)
        if ((limit < 10)); then
            echo "=== $name: skipped, ${limit}s of the wall time left"
            failed+=("$name (no time left)")
            return 0
        fi
        budget=", $(left)s of the wall time left"
    fi
    echo "=== $name (limit ${limit}s$budget): $*"
    local t1=$SECONDS
    timeout -s INT -k "${KILL_AFTER:-20}" "$limit" "$@"
    local rc=$?
    echo "=== $name: exit $rc after $((SECONDS - t1)) s"
    ((rc == 0)) || failed+=("$name (exit $rc)")
    pack
}
