#!/usr/bin/env bash
# A free-threaded CPython 3.14 ("3.14t", built with --disable-gil) and a venv on it, for
# testing nostall's Python bindings without the GIL.
#
#   scripts/python-ft.sh VENV        e.g. scripts/python-ft.sh .venv-ft
#
# Why build it: Debian 12 has no 3.14 at all, and Debian ships no free-threaded binary;
# the only registries this project may reach are Debian's mirrors, PyPI and crates.io.
# Debian's pool has the upstream CPython source (the orig tarball of its python3.14
# package), so we build that, once, into a cache outside the repository.
#
# Status (2026-11-28, docs/roadmap.md issue 53): with NOSTALL_FT_VERSION=3.13 this builds
# and installs (4.5 min; torch's cp313t wheel, the GIL off after importing numpy and torch,
# on again after torchvision, whose import of torch._dynamo loads triton). PyO3 0.30 builds
# free-threaded modules for 3.14 on only, and from this machine Debian's pool answers 404
# for python3.14's orig tarball (in sid and forky) while it serves the package's .debs: the
# default, 3.14, fails at the download here.
#
# Idempotent: each step first checks whether its result is already there, so a second run
# only checks (a few seconds). Environment:
#   NOSTALL_FT_VERSION the CPython minor version (default 3.14: PyO3 builds free-threaded
#                      modules for 3.14 on, not 3.13)
#   NOSTALL_FT_PREFIX  where the interpreter goes (default ~/.cache/nostall-ft/cpython-VERSIONt)
#   NOSTALL_FT_SUITE   the Debian suite whose python3.X source is built (default forky)
#   NOSTALL_FT_MIRROR  the Debian mirror (default http://deb.debian.org/debian)
#   NOSTALL_FT_JOBS    make's -j (default: the number of CPUs)
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 VENV    (the path of the venv to create on the free-threaded CPython)" >&2
  exit 2
fi
# Absolute paths: the build below changes directory.
VENV=$(realpath -m -- "$1")
PYVER=${NOSTALL_FT_VERSION:-3.14}
PREFIX=$(realpath -m -- "${NOSTALL_FT_PREFIX:-$HOME/.cache/nostall-ft/cpython-${PYVER}t}")
SUITE=${NOSTALL_FT_SUITE:-forky}
MIRROR=${NOSTALL_FT_MIRROR:-http://deb.debian.org/debian}
JOBS=${NOSTALL_FT_JOBS:-$(nproc)}
PY=$PREFIX/bin/python${PYVER}t
# Downloads and the build tree; removed once the interpreter is installed, kept after a
# failure so that a rerun does not download the tarball again.
WORK=$PREFIX.work

log() { echo "python-ft: $*"; }
die() { echo "python-ft: error: $*" >&2; exit 1; }

# PYTHON_GIL=1 in the caller's environment would turn the GIL back on and fool the checks.
unset PYTHON_GIL

# The extension modules the build must have: configure skips silently those whose -dev
# package is missing, so an interpreter without one of them is treated as not built.
NEEDED_MODULES="ssl, zlib, bz2, lzma, ctypes, sqlite3, _uuid, hashlib, _decimal"

# True when $PY exists, runs, was built free-threaded, runs with the GIL off, and has
# every needed module.
interpreter_ok() {
  [[ -x $PY ]] && "$PY" -c "
import sys, sysconfig
import $NEEDED_MODULES
sys.exit(0 if sysconfig.get_config_var('Py_GIL_DISABLED') and not sys._is_gil_enabled() else 1)
" >/dev/null 2>&1
}

# ---- 1. Build dependencies (Debian packages), only those missing --------------------------
# No readline (its own REPL does without it), gdbm or tk: nostall needs none of them.
APT_DEPS=(build-essential pkg-config curl ca-certificates xz-utils gpgv debian-archive-keyring
  libssl-dev zlib1g-dev libbz2-dev liblzma-dev libffi-dev libsqlite3-dev uuid-dev)
missing_debs=()
for p in "${APT_DEPS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
    missing_debs+=("$p")
done
if ((${#missing_debs[@]})); then
  SUDO=()
  if [[ $EUID -ne 0 ]]; then
    command -v sudo >/dev/null || die "need root (or sudo) to install: ${missing_debs[*]}"
    SUDO=(sudo)
  fi
  log "installing ${missing_debs[*]}"
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    "${missing_debs[@]}" >/dev/null
fi

# ---- 2 and 3. The interpreter: download, verify, build, install ---------------------------
if interpreter_ok; then
  log "interpreter ok: $PY"
else
  mkdir -p "$WORK"
  cd "$WORK"

  # The chain of trust, as apt's own: the suite's InRelease is signed by Debian's archive
  # keys (checked with gpgv against debian-archive-keyring, which Debian 12 has with the
  # trixie keys), it lists the SHA256 of the Sources index, and the index lists the
  # SHA256 of the tarball. Plain http is then fine, as it is for apt.
  log "fetching the $SUITE source index"
  curl -fsS --retry 3 -o InRelease "$MIRROR/dists/$SUITE/InRelease"
  gpgv --quiet --keyring /usr/share/keyrings/debian-archive-keyring.gpg \
    --output Release InRelease 2>gpgv.log ||
    { cat gpgv.log >&2; die "the signature of $MIRROR/dists/$SUITE/InRelease does not verify"; }
  curl -fsS --retry 3 -o Sources.xz "$MIRROR/dists/$SUITE/main/source/Sources.xz"
  # The Release file's Checksums-Sha256 section: " <sha256> <size> main/source/Sources.xz".
  want=$(awk '/^SHA256:/{s=1; next} /^[^ ]/{s=0} s && $3 == "main/source/Sources.xz" {print $1}' Release)
  got=$(sha256sum Sources.xz | cut -d' ' -f1)
  [[ -n $want && $want == "$got" ]] ||
    die "Sources.xz: SHA256 $got is not the one in the signed Release file (${want:-none})"

  # The python${PYVER} stanza: its Directory (pool path), and from its Checksums-Sha256 the
  # line of the orig.tar.xz (the upstream tarball, not its .asc nor Debian's patches).
  read -r DIR TARBALL SHA < <(xz -dc Sources.xz | awk '
    /^Package: / { p = ($2 == "python'"$PYVER"'") }
    p && /^Directory: / { dir = $2 }
    p && /^Checksums-Sha256:/ { c = 1; next }
    p && c && /^ / { if (index($3, "python'"$PYVER"'_") == 1 && $3 ~ /\.orig\.tar\.xz$/) { tar = $3; sha = $1 } next }
    { c = 0 }
    /^$/ && p && tar { print dir, tar, sha; done = 1; exit }
    END { if (p && tar && !done) print dir, tar, sha }') || true
  [[ -n ${TARBALL:-} ]] || die "no python$PYVER orig.tar.xz in $SUITE's Sources index"

  if [[ -f $TARBALL && $(sha256sum "$TARBALL" | cut -d' ' -f1) == "$SHA" ]]; then
    log "$TARBALL already downloaded"
  else
    log "downloading $MIRROR/$DIR/$TARBALL"
    curl -fsS --retry 3 -o "$TARBALL.part" "$MIRROR/$DIR/$TARBALL"
    got=$(sha256sum "$TARBALL.part" | cut -d' ' -f1)
    [[ $got == "$SHA" ]] ||
      die "$TARBALL: SHA256 mismatch: downloaded $got, the $SUITE Sources index says $SHA"
    mv "$TARBALL.part" "$TARBALL"
  fi

  rm -rf src stage
  mkdir src
  tar -xJf "$TARBALL" -C src --strip-components=1
  cd src
  # --disable-gil: the point. No PGO/LTO (--enable-optimizations, --with-lto): they
  # triple the build time, and the tests need a working interpreter, not a fast one.
  # --without-ensurepip: pip comes into the venv from venv's own bundled wheel.
  # --disable-test-modules: CPython's own test suite, neither built nor installed.
  log "building CPython from $TARBALL (-j$JOBS; a few minutes; log: $WORK/build.log)"
  {
    ./configure --disable-gil --prefix="$PREFIX" --without-ensurepip --disable-test-modules &&
      make -j"$JOBS" &&
      # Installed into a staging tree, then moved into place: an interrupted install never
      # leaves a half-installed prefix that the check above might take for a good one.
      make install DESTDIR="$WORK/stage"
  } >"$WORK/build.log" 2>&1 || { tail -n 40 "$WORK/build.log" >&2; die "build failed (log: $WORK/build.log)"; }

  # Replace an earlier (broken or incomplete) install, but only one of ours.
  if [[ -e $PREFIX ]]; then
    [[ -f $PREFIX/.nostall-python-ft ]] ||
      die "$PREFIX exists and was not made by this script: remove it or set NOSTALL_FT_PREFIX"
    rm -rf "$PREFIX"
  fi
  mkdir -p "$(dirname "$PREFIX")"
  mv "$WORK/stage$PREFIX" "$PREFIX"
  touch "$PREFIX/.nostall-python-ft"
  interpreter_ok || {
    "$PY" -c "import $NEEDED_MODULES" || true
    die "the built interpreter is not free-threaded or lacks a module (log: $WORK/build.log)"
  }
  cd /
  rm -rf "$WORK"
  log "installed $PY"
fi

# ---- 4. The venv, and the packages it lacks --------------------------------------------------
VPY=$VENV/bin/python
if [[ -x $VPY && $(readlink -f "$VPY") == "$(readlink -f "$PY")" ]]; then
  log "venv ok: $VENV"
else
  if [[ -f $VENV/pyvenv.cfg ]]; then
    log "recreating $VENV (a venv of another interpreter)"
    "$PY" -m venv --clear "$VENV"
  elif [[ -e $VENV && -n $(ls -A "$VENV") ]]; then
    die "$VENV exists and is not a venv: remove it or pick another path"
  else
    log "creating $VENV"
    "$PY" -m venv "$VENV"
  fi
fi

# The distributions of NAMES that the venv lacks (a metadata lookup: much faster than
# letting pip resolve what is already installed).
missing_dists() {
  "$VPY" - "$@" <<'EOF'
import sys, importlib.metadata as md
for name in sys.argv[1:]:
    try:
        md.version(name)
    except md.PackageNotFoundError:
        print(name)
EOF
}
PIP=("$VPY" -m pip install -q --disable-pip-version-check --prefer-binary)

mapfile -t need < <(missing_dists maturin pytest numpy psutil)
if ((${#need[@]})); then
  log "pip install ${need[*]}"
  "${PIP[@]}" "${need[@]}"
fi

# torch publishes free-threaded (cp313t, cp314t) wheels on PyPI; torchvision's wheels
# are py3-none (and need the torch they were built for, so the two go together). Wheels
# only: there is no torch sdist to fall back on, and a failure here must not fail the
# script, only be said plainly.
mapfile -t need < <(missing_dists torch torchvision)
if ((${#need[@]})); then
  log "pip install torch torchvision (large: CUDA libraries included)"
  if ! "${PIP[@]}" --only-binary=:all: torch torchvision; then
    log "WARNING: torch/torchvision could not be installed: no free-threaded x86_64 wheel on PyPI for" \
      "this platform? The venv has everything else; the torch tests will be skipped."
  fi
fi

# ---- 5. What we have ------------------------------------------------------------------------
"$VPY" - <<'EOF'
import sys, sysconfig, importlib.metadata as md
print(f"python-ft: {sys.executable}: Python {sys.version.split()[0]}"
      f" (Py_GIL_DISABLED={sysconfig.get_config_var('Py_GIL_DISABLED')})")
print(f"python-ft: sys._is_gil_enabled() = {sys._is_gil_enabled()}")
for name in ("pip", "maturin", "pytest", "numpy", "psutil", "torch", "torchvision"):
    try:
        version = md.version(name)
    except md.PackageNotFoundError:
        version = "NOT INSTALLED"
    print(f"python-ft:   {name} {version}")

# An extension module that does not declare itself free-threading-safe turns the GIL back
# on when imported (with a RuntimeWarning naming it): say which, if any, of these does.
import importlib, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for name in ("numpy", "torch", "torchvision"):
        try:
            importlib.import_module(name)
        except ImportError as e:
            print(f"python-ft: import {name}: {e}")
            continue
        by = [str(w.message).split("'")[1] for w in caught if "GIL" in str(w.message)]
        print(f"python-ft: after import {name}: sys._is_gil_enabled() = {sys._is_gil_enabled()}"
              + (f" (turned on by {', '.join(by)})" if by else ""))
EOF
