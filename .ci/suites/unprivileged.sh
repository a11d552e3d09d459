#!/usr/bin/env bash
# The sandbox tests again, as an unprivileged user: run by .ci/run after pytest.
#
# Root and other users get different guarantees (bwrap needs an unprivileged
# user namespace; RLIMIT_NPROC binds only non-root users, so the fork bomb
# runs only here). The checkout may sit under a folder only root can enter
# (/root), so the tree and its virtual environment are copied to a fresh
# folder the user owns, outside the home folder, and removed afterwards.
# Idempotent: the user (EXECUTOR_CI_USER, which .ci/run makes anew for each
# run, else executor-ci) is made once and reused; the checkout is not touched.
set -euo pipefail
cd "$(dirname "$0")/../.."

user=${EXECUTOR_CI_USER:-executor-ci}
if [ "$(id -u)" != 0 ]; then
    echo "unprivileged suite: needs root to create $user; skipped" >&2
    exit 0
fi
if ! id "$user" >/dev/null 2>&1; then
    useradd --create-home --shell /bin/sh "$user"
fi

scratch=$(mktemp -d /var/tmp/executor-unprivileged.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
# The tree without its caches; the venv too, whose interpreter must be
# reachable by the user (a pyenv build under /root would not be).
tar --exclude=.git --exclude=.mypy_cache --exclude=.ruff_cache --exclude=.pytest_cache \
    --exclude=__pycache__ --exclude=.hypothesis -cf - . | tar -C "$scratch" -xf -
chown -R "$user:" "$scratch"

# The venv's own interpreter may be out of the user's reach (a pyenv build under
# /root): a venv of the system's Python of the same minor version (so the same
# compiled ABI) for the user, seeing the packages the CI venv installed.
packages=$(find "$scratch/.venv/lib" -maxdepth 2 -name site-packages -print -quit 2>/dev/null || true)
if [ -z "$packages" ]; then
    echo "unprivileged suite: no .venv with installed packages (run .ci/run first)" >&2
    exit 1
fi
version=$(basename "$(dirname "$packages")")   # python3.X
system_python=/usr/bin/$version
if ! [ -x "$system_python" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$version-minimal" >/dev/null
fi
venv=$scratch/.venv-unprivileged
runuser -u "$user" -- "$system_python" -m venv --without-pip "$venv"
echo "$packages" >"$venv/lib/$version/site-packages/executor-ci.pth"
python=$venv/bin/python
runuser -u "$user" -- "$python" -c 'import anyio, pytest, trio, psutil'

cd "$scratch"
# setpriv would do as well; runuser gives the user's own groups and a login-less shell.
# Both event loops already ran these as root; the kernel's answers do not
# depend on the loop, so asyncio alone keeps this run short.
runuser -u "$user" -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$(getent passwd "$user" | cut -d: -f6)" \
    EXECUTOR_REQUIRE_SANDBOX=1 PYTHONDONTWRITEBYTECODE=1 \
    "$python" -m pytest -q -p no:cacheprovider tests/test_sandbox.py tests/test_sandbox_escape.py \
    -k "asyncio or not anyio"
