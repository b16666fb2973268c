#!/usr/bin/env bash
# Install PostgreSQL 15 + pg_cron (Debian bookworm packages) and pgvector
# (built from Debian trixie's source package, as bookworm ships no PG15 binary).
# Idempotent: a second run only checks what is already there. Must run as root.
set -euo pipefail

PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
EXT_DIR=/usr/share/postgresql/15/extension
PKGS=(postgresql-15 postgresql-15-cron postgresql-server-dev-15 build-essential dpkg-dev)
export DEBIAN_FRONTEND=noninteractive

# 1. Debian packages: only touch apt when something is missing (keeps re-runs fast
#    and avoids upgrading an already installed server as a side effect).
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "install-deps: installing ${missing[*]}" >&2
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# 2. pgvector, unless already installed.
if [[ ! -f $EXT_DIR/vector.control ]]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    # The trixie entry lives in a private apt config (own sources dir, own lists
    # dir, no on-disk package caches), so the system's apt never sees it. It is
    # deb-src only, so it cannot provide trixie binary packages either; we do
    # not use `apt-get build-dep`, the build deps come from bookworm (step 1).
    mkdir -p "$tmp/sources.list.d" "$tmp/lists/partial" "$tmp/src"
    cat >"$tmp/sources.list.d/trixie-src.sources" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt_tmp=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$tmp/sources.list.d"
             -o "Dir::State::Lists=$tmp/lists" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
             -o APT::Sandbox::User=root)
    apt-get "${apt_tmp[@]}" update -qq
    (cd "$tmp/src" && apt-get "${apt_tmp[@]}" source -qq pgvector >&2)

    # Bitcode for JIT inlining needs the clang recorded in PG's Makefile.global.
    mk_global=$(dirname "$("$PG_CONFIG" --pgxs)")/../Makefile.global
    clang=$(awk '$1 == "CLANG" {print $3}' "$mk_global")
    make_args=(PG_CONFIG="$PG_CONFIG" OPTFLAGS=)   # OPTFLAGS= drops -march=native (portable build)
    command -v "$clang" >/dev/null || make_args+=(with_llvm=no)
    src=$(find "$tmp/src" -mindepth 1 -maxdepth 1 -type d -name 'pgvector-*')
    make -C "$src" -s -j"$(nproc)" "${make_args[@]}" >&2
    make -C "$src" -s "${make_args[@]}" install >&2
fi

ctl_version() { sed -n "s/^default_version = '\(.*\)'/\1/p" "$EXT_DIR/$1.control"; }
echo "installed: PostgreSQL $(/usr/lib/postgresql/15/bin/postgres --version | awk '{print $3}')," \
     "pg_cron $(ctl_version pg_cron) (deb $(dpkg-query -W -f='${Version}' postgresql-15-cron))," \
     "vector $(ctl_version vector)"
