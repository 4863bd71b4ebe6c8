#!/usr/bin/env bash
# Build (or reuse) the test image and print its tag as the last line of stdout (all logs go to stderr).
#
#   image=$(bash tests/harness/build_image.sh | tail -n 1)
#
# The image is `verl-async-dapo-test:<hash>` (+ `:latest`), where <hash> covers every input: this script, the
# pinned wheel list, the stand-in (tests/standin/**: make_tree.py, recipe configs, entry modules), the verl versions
# and the base image's hash. A cached build costs one `docker image inspect`.
#
#   1. base  `verl-async-dapo-test-base:<base hash>`: mmdebstrap of a minbase Debian rootfs (python3 + tools) with
#      the machine's own apt sources (read on stdin), `docker import`ed; cached on its own, so changing the
#      stand-in never re-runs mmdebstrap.
#   2. image: `docker build --network none` FROM the local base (no registry): Python wheels downloaded on the HOST
#      and installed offline, plus verl "source checkouts" from tests/standin/make_tree.py at /opt/verl-<v> and
#      /verl (= the newest, the default VERL_HOME). Default command: sleep infinity.
#
# Needs: docker, mmdebstrap (bash tests/harness/ensure_docker.sh installs both), PyPI for the wheels.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
IMAGE_REPO=verl-async-dapo-test
BASE_REPO=verl-async-dapo-test-base
SUITE=bookworm
BASE_PACKAGES=(python3 python3-pip python3-venv procps coreutils ca-certificates)
VERL_VERSIONS=(0.6.1 0.9.1)
DEFAULT_VERL=0.9.1
PLATFORMS=(manylinux2014_x86_64 manylinux_2_17_x86_64 manylinux_2_28_x86_64 manylinux_2_34_x86_64 manylinux_2_36_x86_64)
SOURCES=${APT_SOURCES:-/etc/apt/sources.list.d/debian.sources}
REQUIREMENTS=$HERE/image-requirements.txt
CACHE=${VAD_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/verl-async-dapo-tests}
if [[ -x $ROOT/.venv/bin/python ]]; then PY=${PYTHON:-$ROOT/.venv/bin/python}; else PY=${PYTHON:-python3}; fi

log() { printf 'build_image: %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}
short_hash() { sha256sum | cut -c1-16; }

base_inputs() {
    printf '%s\n' "base-recipe-v1" "$SUITE" "${BASE_PACKAGES[@]}"
    cat "$SOURCES"
}

image_inputs() {
    cd "$ROOT"
    printf '%s\n' "image-recipe-v1" "$BASE_TAG" "${VERL_VERSIONS[@]}" "$DEFAULT_VERL"
    {
        printf '%s\n' tests/harness/build_image.sh tests/harness/image-requirements.txt
        find tests/standin -type f ! -path '*/__pycache__/*' ! -name '*.pyc'
    } | LC_ALL=C sort | xargs -d '\n' sha256sum
}

[[ -r $SOURCES ]] || die "apt sources $SOURCES not found (set APT_SOURCES to a deb822 or one-line sources file)"
BASE_TAG="$BASE_REPO:$(base_inputs | short_hash)"
TAG="$IMAGE_REPO:$(image_inputs | short_hash)"

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

finish() {
    docker tag "$TAG" "$IMAGE_REPO:latest"
    printf '%s\n' "$TAG"
    exit 0
}

if image_exists "$TAG"; then
    log "cached: $TAG"
    finish
fi

mkdir -p "$CACHE"
# One builder at a time per machine (a test session and run.sh may race); re-check once we hold the lock.
exec 9>"$CACHE/build_image.lock"
flock 9
if image_exists "$TAG"; then
    log "cached (built meanwhile): $TAG"
    finish
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vad-image.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

build_base() {
    if image_exists "$BASE_TAG"; then
        log "base cached: $BASE_TAG"
        return
    fi
    command -v mmdebstrap >/dev/null 2>&1 || die "mmdebstrap is missing: run bash tests/harness/ensure_docker.sh"
    local include
    include=$(IFS=,; printf '%s' "${BASE_PACKAGES[*]}")
    log "mmdebstrap $SUITE ($include)"
    mmdebstrap --variant=minbase --include="$include" "$SUITE" "$WORK/rootfs.tar" - <"$SOURCES" >&2
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["sleep", "infinity"]' \
        "$WORK/rootfs.tar" "$BASE_TAG" >&2
    rm -f "$WORK/rootfs.tar"
    log "base built: $BASE_TAG"
}

# Prints the directory holding every pinned wheel plus requirements.txt; cached by the pin list's hash.
fetch_wheels() {
    local dir tmp
    dir="$CACHE/image-wheels/$(short_hash <"$REQUIREMENTS")"
    if [[ -f $dir/.complete ]]; then
        printf '%s\n' "$dir"
        return
    fi
    mkdir -p "$CACHE/image-wheels"
    tmp=$(mktemp -d "$CACHE/image-wheels/.partial.XXXXXX")
    grep -E '#[[:space:]]*sdist-only' "$REQUIREMENTS" | sed -E 's/[[:space:]]*#.*//' >"$tmp/.sdist.txt"
    grep -vE '^[[:space:]]*(#|$)|sdist-only' "$REQUIREMENTS" | sed -E 's/[[:space:]]*#.*//' >"$tmp/.binary.txt"
    log "pip download $(wc -l <"$tmp/.binary.txt") wheels (cp311 manylinux), build $(wc -l <"$tmp/.sdist.txt") from sdist"
    # Pure-Python projects that publish no wheel: build one here, it runs anywhere.
    "$PY" -m pip wheel --no-deps -q -w "$tmp" -r "$tmp/.sdist.txt" >&2
    "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
        "${PLATFORMS[@]/#/--platform=}" -q -d "$tmp" -r "$tmp/.binary.txt" >&2
    cp "$REQUIREMENTS" "$tmp/requirements.txt"
    rm -f "$tmp/.sdist.txt" "$tmp/.binary.txt"
    touch "$tmp/.complete"
    rm -rf "$dir"
    mv "$tmp" "$dir"
    printf '%s\n' "$dir"
}

build_image() {
    local ctx="$WORK/context" wheels version
    mkdir -p "$ctx/trees"
    wheels=$(fetch_wheels)
    cp -r "$wheels" "$ctx/wheels"
    rm -f "$ctx/wheels/.complete"
    for version in "${VERL_VERSIONS[@]}"; do
        log "make_tree verl $version"
        "$PY" "$ROOT/tests/standin/make_tree.py" "$version" "$ctx/trees/verl-$version" >&2
    done
    cat >"$ctx/Dockerfile" <<EOF
FROM $BASE_TAG
ENV LANG=C.UTF-8
COPY wheels /tmp/wheels
RUN python3 -m pip install --no-index --find-links /tmp/wheels --break-system-packages --root-user-action=ignore \\
        --no-cache-dir -q -r /tmp/wheels/requirements.txt \\
    && rm -rf /tmp/wheels \\
    && python3 -c "import hydra, omegaconf, swanlab"
$(for version in "${VERL_VERSIONS[@]}"; do printf 'COPY trees/verl-%s /opt/verl-%s\n' "$version" "$version"; done)
COPY trees/verl-$DEFAULT_VERL /verl
WORKDIR /verl
LABEL io.verl-async-dapo.test="1" io.verl-async-dapo.test-image="$TAG"
CMD ["sleep", "infinity"]
EOF
    log "docker build $TAG"
    # The legacy builder uses a local FROM image without asking any registry; --network none keeps it offline.
    DOCKER_BUILDKIT=0 docker build --network none -t "$TAG" "$ctx" >&2
}

# Untag test images older than an hour so stand-in edits do not pile up images. A session that is still using one
# keeps it: an image used by a container is not removed without -f.
prune_old_images() {
    local ref created now
    now=$(date +%s)
    while read -r ref created; do
        [[ $ref == "$TAG" || $ref == "$IMAGE_REPO:latest" ]] && continue
        created=$(date -d "${created% UTC}" +%s 2>/dev/null) || continue
        ((now - created > 3600)) || continue
        if docker rmi "$ref" >/dev/null 2>&1; then log "removed old $ref"; fi
    done < <(docker image ls "$IMAGE_REPO" --format '{{.Repository}}:{{.Tag}} {{.CreatedAt}}')
}

build_base
build_image
log "built: $TAG"
prune_old_images
finish
