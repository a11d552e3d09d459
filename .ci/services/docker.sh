# Docker engine for the DockerExecutor tests: sourced by .ci/run.
#
# Installs docker.io, starts dockerd without bridge or iptables (containers run
# with network "none" only), builds the two test images without any registry,
# exports EXECUTOR_REQUIRE_DOCKER=1 and registers stop_docker in `cleanups`.
# Idempotent: an engine already answering on the socket is used as it is, and
# an image already present is not built again.

docker_state=${EXECUTOR_DOCKER_STATE:-/tmp/executor-ci-docker}
docker_socket=$docker_state/docker.sock
docker_started=""

install_docker() {
    if ! command -v dockerd >/dev/null || ! command -v busybox >/dev/null \
        || ! [ -x /usr/bin/python3.11 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            docker.io busybox-static python3.11-minimal >/dev/null
    fi
}

start_docker() {
    mkdir -p "$docker_state"
    export DOCKER_HOST="unix://$docker_socket"
    if docker version >/dev/null 2>&1; then
        return 0
    fi
    local driver=overlay2
    for driver in overlay2 vfs; do
        dockerd --bridge=none --iptables=false --ip6tables=false \
            --storage-driver="$driver" \
            --data-root="$docker_state/data" --exec-root="$docker_state/exec" \
            --pidfile="$docker_state/dockerd.pid" --host="$DOCKER_HOST" \
            >"$docker_state/dockerd-$driver.log" 2>&1 &
        docker_started=$!
        for _ in $(seq 100); do
            docker version >/dev/null 2>&1 && break
            kill -0 "$docker_started" 2>/dev/null || break
            sleep 0.1
        done
        # overlay2 can start and still fail at the first container: try one.
        if docker version >/dev/null 2>&1 && probe_storage; then
            echo "dockerd $docker_started up with storage driver $driver"
            return 0
        fi
        stop_docker
    done
    echo "dockerd did not start; logs:" >&2
    cat "$docker_state"/dockerd-*.log >&2
    return 1
}

probe_storage() {
    local probe="$docker_state/probe"
    rm -rf "$probe" && mkdir -p "$probe/bin"
    cp "$(command -v busybox)" "$probe/bin/busybox"
    ln -s busybox "$probe/bin/true"
    tar -C "$probe" -c . | docker import - executor-test/probe >/dev/null || return 1
    docker run --rm --network none executor-test/probe /bin/true >/dev/null 2>&1
    local ok=$?
    docker rmi executor-test/probe >/dev/null 2>&1
    rm -rf "$probe"
    return $ok
}

build_busybox_rootfs() {
    # A root filesystem of busybox applets: sh, cat, sleep, kill, grep, ...
    local root=$1
    mkdir -p "$root/bin" "$root/usr/bin" "$root/tmp" "$root/workspace" "$root/etc" "$root/proc"
    chmod 1777 "$root/tmp"
    cp "$(command -v busybox)" "$root/bin/busybox"
    for applet in $("$root/bin/busybox" --list); do
        [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
    done
    ln -sf /bin/env "$root/usr/bin/env"
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' \
        >"$root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
}

build_images() {
    local work="$docker_state/rootfs"
    if ! docker image inspect executor-test/busybox >/dev/null 2>&1; then
        rm -rf "$work" && mkdir -p "$work"
        build_busybox_rootfs "$work"
        tar -C "$work" -c . | docker import -c 'WORKDIR /workspace' - executor-test/busybox
        rm -rf "$work"
    fi
    if ! docker image inspect executor-test/python >/dev/null 2>&1; then
        # Busybox plus the system's Python 3.11 and the libraries it links.
        rm -rf "$work" && mkdir -p "$work"
        build_busybox_rootfs "$work"
        mkdir -p "$work/usr/lib"
        cp /usr/bin/python3.11 "$work/usr/bin/python3.11"
        ln -s python3.11 "$work/usr/bin/python3"
        local lib
        for lib in $(ldd /usr/bin/python3.11 | grep -o '/[^ ]*'); do
            mkdir -p "$work$(dirname "$lib")"
            cp -L "$lib" "$work$lib"
        done
        tar -C /usr/lib -c --exclude=test --exclude=idlelib --exclude=tkinter \
            --exclude=ensurepip --exclude=site-packages --exclude=dist-packages \
            --exclude=__pycache__ python3.11 | tar -C "$work/usr/lib" -x
        tar -C "$work" -c . | docker import -c 'WORKDIR /workspace' - executor-test/python
        rm -rf "$work"
    fi
}

stop_docker() {
    # Only the dockerd this script started, by pid, and the containerd it runs.
    [ -n "$docker_started" ] || return 0
    local containerd_pid
    containerd_pid=$(ps -o pid=,comm= --ppid "$docker_started" | awk '$2 == "containerd" {print $1}')
    if kill -0 "$docker_started" 2>/dev/null; then
        kill -TERM "$docker_started"
        for _ in $(seq 100); do
            kill -0 "$docker_started" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$docker_started" 2>/dev/null || true
    fi
    # dockerd stops its containerd; one that outlived it is stopped here.
    if [ -n "$containerd_pid" ] && kill -0 "$containerd_pid" 2>/dev/null; then
        kill -TERM "$containerd_pid" 2>/dev/null || true
    fi
    docker_started=""
}

install_docker
start_docker
build_images
export EXECUTOR_REQUIRE_DOCKER=1
cleanups+=(stop_docker)
