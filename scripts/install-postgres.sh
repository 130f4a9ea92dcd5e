#!/usr/bin/env bash
# Install the PostgreSQL server binaries (initdb, pg_ctl) that the test suite needs.
#
# The tests start their own throwaway server on a free loopback port
# (tests/postgres_server.py), so all we need are the binaries; the cluster that
# Debian's package creates and starts is never used.
#
# Idempotent: does nothing when pg_ctl is already installed.
set -euo pipefail

find_pg_ctl() {
    # Debian keeps the server binaries off PATH, in /usr/lib/postgresql/<ver>/bin;
    # prefer the highest version there, then fall back to PATH.
    local candidate
    candidate=$(ls -d /usr/lib/postgresql/*/bin/pg_ctl 2>/dev/null | sort -V | tail -n 1 || true)
    if [[ -n "$candidate" && -x "$candidate" ]]; then
        echo "$candidate"
    else
        command -v pg_ctl || true
    fi
}

pg_ctl_path=$(find_pg_ctl)
if [[ -n "$pg_ctl_path" ]]; then
    echo "install-postgres: found pg_ctl at $pg_ctl_path (nothing to do)"
    exit 0
fi

if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    cat >&2 <<'EOF'
install-postgres: PostgreSQL server binaries (pg_ctl, initdb) not found, and this
script can only install them as root on a Debian/Ubuntu system (apt-get).
Install the PostgreSQL server package yourself, e.g.
    sudo apt-get install postgresql        # Debian / Ubuntu
    sudo dnf install postgresql-server     # Fedora / RHEL
    brew install postgresql                # macOS
and make sure pg_ctl is on PATH or under /usr/lib/postgresql/<ver>/bin.
EOF
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt_install() { apt-get install -y --no-install-recommends postgresql; }
# Only refresh the package lists when the cached ones are not enough (saves time in CI).
if ! apt_install; then
    apt-get update
    apt_install
fi

# The package creates a "main" cluster and may start it on port 5432. The tests never
# use it (they run their own server on a random port), so stop it to save resources.
if command -v pg_lsclusters >/dev/null 2>&1; then
    pg_lsclusters --no-header 2>/dev/null | while read -r ver name _port status _rest; do
        if [[ "$status" == online* ]]; then
            pg_ctlcluster "$ver" "$name" stop || true
        fi
    done
fi

pg_ctl_path=$(find_pg_ctl)
if [[ -z "$pg_ctl_path" ]]; then
    echo "install-postgres: installed the postgresql package but still cannot find pg_ctl" >&2
    exit 1
fi
echo "install-postgres: found pg_ctl at $pg_ctl_path (installed)"
