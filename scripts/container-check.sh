#!/usr/bin/env bash
# The suite's image built from this repository's Dockerfile and run, on a machine without a GPU
# or a Docker daemon: podman builds and runs it (`make container-check`; .ci/run calls it).
#
#   1. the base: NVIDIA's, when it can be pulled; else a Debian stand-in built with mmdebstrap,
#      announced loudly (a GPU box is the only place the real base is tried for real)
#   2. the suite's image, and mlflow/Dockerfile's tracking server
#   3. torchao (the fp8 modes) and timm (workload: timm) import at their pinned versions
#   4. no GPU: `run` exits 2 with the advice to pass the GPUs or --device cpu
#   5. --device cpu: experiments/container-check.yaml (eager and compiled) into a folder from the
#      host, as a host user that is not in the image; its files belong to that user
#   6. --model /models/cnn.py:build: examples/cnn.py from a mounted folder, as a user's own model
#   7. `podman stop` mid-run: exit 143, the invocation recorded interrupted, no MLflow run left
#      RUNNING; --resume in a new container finishes the matrix
#   8. the tracking server with its basic-auth app: anonymous requests get 401, a matrix run from
#      the suite's container logs into it with credentials
# and prints the image sizes and each stage's wall time. Everything it made goes at exit.
#
# Environment: AMP_SUITE_STANDIN_BASE=1 skips trying to pull the real bases; CONTAINER_CHECK_USER
# (default 1234:1234) is the host user the containers run as; CONTAINER_CHECK_KEEP=1 keeps the
# images (a rerun then builds from podman's layer cache).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

STANDIN_ONLY=${AMP_SUITE_STANDIN_BASE:-0}
RUN_USER=${CONTAINER_CHECK_USER:-1234:1234}
KEEP=${CONTAINER_CHECK_KEEP:-0}
PULL_TIMEOUT=${CONTAINER_CHECK_PULL_TIMEOUT:-60}
MATRIX="container-check"  # experiments/container-check.yaml, shipped inside the image
SUITE_IMAGE=localhost/amp-suite:container-check
SERVER_IMAGE=localhost/amp-suite-mlflow:container-check
STANDIN_BASE=localhost/amp-suite-standin-base:bookworm
STANDIN_PYTHON=localhost/amp-suite-standin-python:bookworm
NAME=amp-suite-check-$$

# This machine's podman settings (runc, cgroupfs, no default ulimits), unless the caller has its own.
export CONTAINERS_CONF=${CONTAINERS_CONF:-$REPO/docker/containers.conf}

STAGES=()
TIMES=()
STAGE_NAME=""
STAGE_START=0
FAILED=""
WORK=""
IMAGES_BEFORE=""
SIZES=()

say() { printf '\n== %s\n' "$*"; }
fail() {  # the reason goes on the last line, under the table
    FAILED=$1
    exit 1
}
begin() {
    end_stage
    STAGE_NAME=$1
    STAGE_START=$SECONDS
    say "$1"
}
end_stage() {
    if [[ -n $STAGE_NAME ]]; then
        STAGES+=("$STAGE_NAME")
        TIMES+=("$((SECONDS - STAGE_START))")
        STAGE_NAME=""
    fi
}

table() {
    local i
    [[ -n $STAGE_NAME ]] && STAGES+=("$STAGE_NAME (failed)") && TIMES+=("$((SECONDS - STAGE_START))")
    printf '\n%-72s %7s\n' "stage" "wall s"
    for i in "${!STAGES[@]}"; do
        printf '%-72s %7s\n' "${STAGES[$i]}" "${TIMES[$i]}"
    done
    printf '%-72s %7s\n' "total" "$SECONDS"
    for i in "${SIZES[@]}"; do
        echo "$i"
    done
    if [[ -n $FAILED ]]; then
        echo "container-check: FAILED: $FAILED" >&2
    else
        echo "container-check: passed"
    fi
}

cleanup() {
    local rc=$?
    trap - EXIT
    [[ $rc -ne 0 && -z $FAILED ]] && FAILED="exit status $rc at stage '${STAGE_NAME:-?}'"
    table
    if command -v podman >/dev/null; then
        local container
        for container in $(podman ps -a --filter "name=^$NAME-" --format '{{.Names}}' 2>/dev/null); do
            podman rm -f -t 5 "$container" >/dev/null 2>&1 || true
        done
        if [[ $KEEP != 1 ]]; then
            # the images this run made: the tagged ones, then the intermediate layers it left
            podman rmi -f "$SUITE_IMAGE" "$SERVER_IMAGE" "$STANDIN_PYTHON" "$STANDIN_BASE" >/dev/null 2>&1 || true
            local image
            for image in $(comm -13 <(echo "$IMAGES_BEFORE") <(podman images -a -q --no-trunc | sort -u)); do
                podman rmi -f "$image" >/dev/null 2>&1 || true
            done
        fi
    fi
    [[ -n $WORK ]] && rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT

# ---------------------------------------------------------------------------------------------
begin "prerequisites: podman, runc, mmdebstrap"
missing=()
for tool in podman runc mmdebstrap python3; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        echo "installing ${missing[*]} (apt)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc mmdebstrap python3 >/dev/null
    else
        fail "missing ${missing[*]}: install podman, runc and mmdebstrap (root and apt-get do it here)"
    fi
fi
[[ $(id -u) -eq 0 ]] || fail "run as root: rootful podman maps --user $RUN_USER onto the host's files"
podman --version
IMAGES_BEFORE=$(podman images -a -q --no-trunc | sort -u)
WORK=$(mktemp -d /tmp/amp-suite-container-check.XXXXXX)
chmod 755 "$WORK"

# pip inside a build sees what pip sees here: /etc/pip.conf (a mirror, a CA bundle) with every
# file it names mounted. The CA bundle goes to a path of its own: a base's ca-certificates
# package must still be free to write /etc/ssl/certs.
BUILD_MOUNTS=()
if [[ -f /etc/pip.conf ]]; then
    python3 - "$WORK/pip.conf" "$WORK/pip-mounts" <<'EOF'
import configparser, os, sys
config = configparser.RawConfigParser()
config.read("/etc/pip.conf")
mounts = []
for section in config.sections():
    for key, value in config.items(section):
        words = []
        for word in value.split():
            path = word[len("file://"):] if word.startswith("file://") else word
            if os.path.isabs(path) and os.path.exists(path):
                if key in ("cert", "client-cert"):
                    inside = f"/run/host-pip/{key}-{os.path.basename(path)}"
                    mounts.append((path, inside))
                    word = inside
                else:
                    mounts.append((path, path))
            words.append(word)
        config.set(section, key, " ".join(words))
with open(sys.argv[1], "w") as out:
    config.write(out)
with open(sys.argv[2], "w") as out:
    out.writelines(f"-v\n{os.path.realpath(host)}:{inside}:ro\n" for host, inside in mounts)
EOF
    mapfile -t BUILD_MOUNTS <"$WORK/pip-mounts"
    BUILD_MOUNTS+=(-v "$WORK/pip.conf:/etc/pip.conf:ro")
    echo "builds use this machine's /etc/pip.conf, with: ${BUILD_MOUNTS[*]}"
fi
build() {  # build TAG CONTEXT [podman build options...]
    local tag=$1 context=$2
    shift 2
    podman build --format docker --network host "${BUILD_MOUNTS[@]}" -t "$tag" "$@" "$context"
}

# ---------------------------------------------------------------------------------------------
begin "bases: NVIDIA's and python's, or Debian stand-ins"
cuda=$(sed -n 's/^ARG CUDA_VERSION=//p' Dockerfile)
ubuntu=$(sed -n 's/^ARG UBUNTU_VERSION=//p' Dockerfile)
nvidia_base="nvidia/cuda:${cuda}-base-ubuntu${ubuntu}"
python_base=$(sed -n 's/^ARG BASE_IMAGE=//p' mlflow/Dockerfile)
pulled() {
    [[ $STANDIN_ONLY != 1 ]] && timeout "$PULL_TIMEOUT" podman pull -q "$1" >/dev/null 2>&1
}
if pulled "$nvidia_base"; then
    suite_base=$nvidia_base
else
    suite_base=$STANDIN_BASE
fi
if pulled "$python_base"; then
    server_base=$python_base
else
    server_base=$STANDIN_PYTHON
fi
if [[ $KEEP == 1 ]] && podman image exists "$STANDIN_BASE"; then
    echo "reusing $STANDIN_BASE (CONTAINER_CHECK_KEEP=1): a new one would void podman's layer cache"
elif [[ $suite_base == "$STANDIN_BASE" || $server_base == "$STANDIN_PYTHON" ]]; then
    # the mirror this machine's apt uses; mmdebstrap's own default otherwise
    mirror=$(grep -rhoE '(https?|file)://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ \
        2>/dev/null | grep -v security | head -1 | tr -d ' ' || true)
    echo "mmdebstrap bookworm from ${mirror:-the default mirror of mmdebstrap}"
    mmdebstrap --variant=minbase --mode=root --quiet bookworm "$WORK/rootfs.tar" ${mirror:+"$mirror"} </dev/null
    podman import --change 'CMD ["/bin/bash"]' "$WORK/rootfs.tar" "$STANDIN_BASE" >/dev/null
    rm -f "$WORK/rootfs.tar"
fi
if [[ $suite_base == "$STANDIN_BASE" ]]; then
    echo "################################################################################"
    echo "# STAND-IN BASE: $STANDIN_BASE (Debian bookworm minbase, mmdebstrap),"
    echo "# not the NVIDIA image $nvidia_base, which could not be pulled here."
    echo "# The image below is the suite's Dockerfile on that base: no CUDA base layers."
    echo "################################################################################"
fi
if [[ $server_base == "$STANDIN_PYTHON" ]]; then
    echo "STAND-IN BASE: $STANDIN_PYTHON (Debian bookworm's python3 in a venv) for the tracking server, not $python_base"
    mkdir -p "$WORK/python-base"
    cat >"$WORK/python-base/Dockerfile" <<EOF
FROM $STANDIN_BASE
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv \\
    && rm -rf /var/lib/apt/lists/* && python3 -m venv /usr/local/python
ENV PATH=/usr/local/python/bin:\$PATH
CMD ["python"]
EOF
    podman build --format docker --network host -q -t "$STANDIN_PYTHON" "$WORK/python-base" >/dev/null
    echo "built $STANDIN_PYTHON"
fi

# ---------------------------------------------------------------------------------------------
begin "build: the suite's image (Dockerfile)"
build "$SUITE_IMAGE" . \
    --build-arg BASE_IMAGE="$suite_base" \
    --build-arg TORCH_INDEX_URL=https://pypi.org/simple \
    --build-arg GIT_COMMIT="$(git rev-parse HEAD 2>/dev/null || true)"

begin "build: the tracking server's image (mlflow/Dockerfile)"
build "$SERVER_IMAGE" mlflow --build-arg BASE_IMAGE="$server_base"

begin "images: sizes, the compiler's layer, the recorded base"

bytes() { podman image inspect --format '{{.Size}}' "$1"; }
gb() { awk -v b="$1" 'BEGIN { printf "%.2f GB", b / 1e9 }'; }
suite_bytes=$(bytes "$SUITE_IMAGE")
compiler_bytes=$(podman history --no-trunc --format json "$SUITE_IMAGE" | python3 -c '
import json, sys
layers = json.load(sys.stdin)  # podman 4 says CreatedBy, podman 5 created_by
made_by = lambda layer: layer.get("created_by") or layer.get("CreatedBy") or ""
print(next((int(layer["size"]) for layer in layers if "install -y --no-install-recommends gcc g++" in made_by(layer)), ""))')
[[ -n $compiler_bytes ]] || fail "no layer installing gcc g++ in $SUITE_IMAGE's history"
SIZES+=("image $SUITE_IMAGE on $suite_base: $(gb "$suite_bytes") ($(gb "$((suite_bytes - compiler_bytes))") without its compiler layer, $(gb "$compiler_bytes"))")
SIZES+=("image $SERVER_IMAGE on $server_base: $(gb "$(bytes "$SERVER_IMAGE")")")
printf '%s\n' "${SIZES[@]}"
image_base=$(podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$SUITE_IMAGE" |
    sed -n 's/^AMP_SUITE_IMAGE_BASE=//p')
[[ $image_base == "$suite_base" ]] || fail "AMP_SUITE_IMAGE_BASE is '$image_base', the base was $suite_base"
# The optional dependencies the image carries import at constraints.txt's pins: torchao's float8
# training (a CPU skips fp8 cells before it would look for torchao, so the CPU matrix below can't
# tell) and timm (models by name).
for module in torchao.float8 timm; do
    package=${module%%.*}
    pinned=$(sed -n "s/^$package==//p" "$REPO/constraints.txt")
    # stdout only: importing torchao logs warnings (torch's pytree deprecations) on stderr.
    inside=$(podman run --rm --name "$NAME-$package" --entrypoint python "$SUITE_IMAGE" -c \
        "import $module, $package; print($package.__version__)" 2>"$WORK/$package.log") ||
        fail "$module does not import: $(tail -1 "$WORK/$package.log")"
    [[ -n $pinned && $inside == "$pinned"* ]] || fail "the image has $package '$inside'; constraints.txt pins '$pinned'"
    echo "$package $inside in the image (constraints.txt: $pinned)"
done

# ---------------------------------------------------------------------------------------------
records() {  # records FOLDER: one line per record: cell_id status compile reason
    python3 - "$1/results.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    if line.strip():
        r = json.loads(line)
        print(r["cell_id"], r["status"], r["compile"], (r.get("reason") or "").replace("\n", " ")[:120])
EOF
}
runs_folder() {  # a host folder the containers' user owns
    mkdir -p "$WORK/$1"
    chown "$RUN_USER" "$WORK/$1"
    echo "$WORK/$1"
}
suite() {  # suite CONTAINER-NAME-SUFFIX FOLDER [podman run options...] -- [amp-suite arguments...]
    local suffix=$1 folder=$2
    shift 2
    local options=()
    while (($#)) && [[ $1 != -- ]]; do options+=("$1"); shift; done
    shift
    podman run --name "$NAME-$suffix" --network host --user "$RUN_USER" -v "$folder:/runs" \
        "${options[@]}" "$SUITE_IMAGE" "$@"
}

begin "run: no GPU -> exit 2 with advice"
set +e
advice=$(podman run --rm --name "$NAME-nogpu" --network host "$SUITE_IMAGE" 2>&1)
rc=$?
set -e
echo "$advice"
[[ $rc -eq 2 ]] || fail "without a GPU, the image exited $rc, not 2"
[[ $advice == *"no CUDA GPU is visible"* && $advice == *"--gpus all"* && $advice == *"--device cpu"* ]] ||
    fail "without a GPU, the message lacks the advice (--gpus all, --device cpu)"
[[ $advice != *Traceback* ]] || fail "without a GPU, the image printed a traceback"

begin "run: --device cpu, $MATRIX (eager + compiled) as $RUN_USER"
cpu_runs=$(runs_folder cpu)
suite cpu "$cpu_runs" -- run --device cpu --matrix "$MATRIX" || fail "the CPU matrix exited $?"
podman rm "$NAME-cpu" >/dev/null
records "$cpu_runs" | tee "$WORK/cpu-records"
grep -qE '^mlp/\S+/fp32/compile-default ok ' "$WORK/cpu-records" ||
    fail "the compiled fp32 cell is not ok: $(grep compile-default "$WORK/cpu-records" | head -1)"
if grep -vE ' (ok|skipped) ' "$WORK/cpu-records" | grep -q .; then
    fail "a cell neither ok nor skipped: $(grep -vE ' (ok|skipped) ' "$WORK/cpu-records" | head -1)"
fi
strangers=$(find "$cpu_runs" ! -user "${RUN_USER%%:*}" -o ! -group "${RUN_USER##*:}" | head -3)
[[ -z $strangers ]] || fail "files in the runs folder not owned by $RUN_USER: $strangers"
echo "$(find "$cpu_runs" | wc -l) files and folders, all owned by $RUN_USER"
grep -q "\"base\":\"$suite_base\"" "$cpu_runs/results.jsonl" ||
    fail "the records' environment.image.base is not $suite_base"

begin "run: --model, the user's own code from a mounted folder (no rebuild)"
model_runs=$(runs_folder model)
models=$(runs_folder models)
cp "$REPO/examples/cnn.py" "$models/"
suite model "$model_runs" -v "$models:/models:ro" -- \
    run --device cpu --model /models/cnn.py:build --precisions fp32,bf16 --force || fail "--model exited $?"
podman rm "$NAME-model" >/dev/null
records "$model_runs" | tee "$WORK/model-records"
[[ $(grep -cE '^cnn/bs32/seed0/(fp32|bf16) ok ' "$WORK/model-records") -eq 2 ]] ||
    fail "the mounted model's cells are not both ok: $(head -2 "$WORK/model-records")"

begin "run: podman stop mid-run -> 143, interrupted; --resume finishes"
stop_runs=$(runs_folder stop)
suite stop "$stop_runs" -d -- run --device cpu --matrix "$MATRIX" >/dev/null
for _ in $(seq 600); do
    [[ -s $stop_runs/results.jsonl ]] && break
    [[ $(podman inspect --format '{{.State.Running}}' "$NAME-stop") == true ]] ||
        fail "the run ended before its first record: $(podman logs "$NAME-stop" 2>&1 | tail -1)"
    sleep 0.5
done
[[ -s $stop_runs/results.jsonl ]] || fail "no record after 300 s"
podman stop -t 60 "$NAME-stop" >/dev/null
rc=$(podman wait "$NAME-stop")
podman logs --tail 3 "$NAME-stop" 2>&1 || true
podman rm "$NAME-stop" >/dev/null
[[ $rc -eq 143 ]] || fail "podman stop: the run exited $rc, not 143"
python3 - "$stop_runs" <<'EOF' || fail "after podman stop: $(cat "$WORK/stop-check")"
import json, sqlite3, sys
folder = sys.argv[1]
lines = [json.loads(l) for l in open(f"{folder}/invocations.jsonl") if l.strip()]
ended = [l for l in lines if l["event"] == "ended"]
records = [json.loads(l) for l in open(f"{folder}/results.jsonl") if l.strip()]
finished = [r for r in records if r["status"] != "interrupted"]  # a stopped cell is kept, marked interrupted
started = [l for l in lines if l["event"] == "started"]
problem = None
if not ended or ended[-1]["outcome"] != "interrupted":
    problem = f"the invocation ended {ended[-1]['outcome'] if ended else 'without an end line'}, not interrupted"
elif len(finished) >= started[-1]["cells"]:
    problem = f"all {len(finished)} cells finished before the stop: not a mid-run stop"
else:
    with sqlite3.connect(f"file:{folder}/mlflow.db?mode=ro", uri=True) as db:
        running = db.execute("select count(*) from runs where status = 'RUNNING'").fetchone()[0]
        total = db.execute("select count(*) from runs").fetchone()[0]
    if running:
        problem = f"{running} of {total} MLflow runs left RUNNING"
    else:
        stopped = len(records) - len(finished)
        print(f"interrupted after {len(finished)} of {started[-1]['cells']} cells ({stopped} kept interrupted);"
              f" {total} MLflow runs, none RUNNING")
if problem:
    open(sys.argv[1] + "/../stop-check", "w").write(problem)
    sys.exit(1)
EOF
suite resume "$stop_runs" -- run --device cpu --matrix "$MATRIX" --resume || fail "--resume exited $?"
podman rm "$NAME-resume" >/dev/null
records "$stop_runs" | tee "$WORK/stop-records"
expected=$(awk '{print $1}' "$WORK/cpu-records" | sort -u | wc -l)
got=$(grep -E ' (ok|skipped) ' "$WORK/stop-records" | awk '{print $1}' | sort -u | wc -l)
[[ $got -eq $expected ]] || fail "after --resume, $got of $expected cells are recorded ok or skipped"
tail -1 "$stop_runs/invocations.jsonl" | grep -q '"outcome":"finished"' ||
    fail "the resumed invocation did not end finished: $(tail -1 "$stop_runs/invocations.jsonl")"
echo "resumed: $got of $expected cells recorded ok or skipped"

# ---------------------------------------------------------------------------------------------
begin "tracking server: basic auth; the suite logs into it"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
password=$(python3 -c 'import secrets; print(secrets.token_urlsafe(18))')
podman run -d --name "$NAME-server" --network host --no-healthcheck \
    -e MLFLOW_AUTH_ADMIN_USERNAME=admin -e MLFLOW_AUTH_ADMIN_PASSWORD="$password" \
    -e MLFLOW_FLASK_SERVER_SECRET_KEY="$(python3 -c 'import secrets; print(secrets.token_hex(32))')" \
    "$SERVER_IMAGE" server --app-name basic-auth --host 127.0.0.1 --port "$port" >/dev/null
url=http://127.0.0.1:$port
http() {  # http METHOD PATH [USER PASSWORD] [JSON BODY] -> "STATUS BODY"
    python3 - "$url" "$@" <<'EOF'
import base64, json, sys, urllib.error, urllib.request
url, method, path, *rest = sys.argv[1:]
headers = {"Content-Type": "application/json"}
if len(rest) >= 2 and rest[0]:
    headers["Authorization"] = "Basic " + base64.b64encode(f"{rest[0]}:{rest[1]}".encode()).decode()
body = rest[2].encode() if len(rest) > 2 else None
request = urllib.request.Request(url + path, data=body, headers=headers, method=method)
try:
    with urllib.request.urlopen(request, timeout=10) as response:
        print(response.status, response.read().decode())
except urllib.error.HTTPError as error:
    print(error.code, error.read().decode()[:200])
except OSError as error:
    print(0, error)
EOF
}
for _ in $(seq 120); do
    [[ $(http GET /health) == 200* ]] && break
    [[ $(podman inspect --format '{{.State.Running}}' "$NAME-server") == true ]] ||
        fail "the tracking server exited: $(podman logs "$NAME-server" 2>&1 | tail -1)"
    sleep 1
done
[[ $(http GET /health) == 200* ]] || fail "the tracking server is not healthy after 120 s"
anonymous=$(http GET "/api/2.0/mlflow/experiments/search?max_results=5")
echo "anonymous: ${anonymous:0:80}"
[[ $anonymous == 401* ]] || fail "an anonymous request got '${anonymous:0:60}', not 401"
wrong=$(http GET "/api/2.0/mlflow/experiments/search?max_results=5" admin not-the-password)
[[ $wrong == 401* ]] || fail "a wrong password got '${wrong:0:60}', not 401"
server_runs=$(runs_folder server)
suite server-run "$server_runs" -e MLFLOW_TRACKING_USERNAME=admin -e MLFLOW_TRACKING_PASSWORD="$password" -- \
    run --device cpu --matrix "$MATRIX" --precisions fp32 --tracking-uri "$url" --experiment container-check-server ||
    fail "the matrix logging into the server exited $?"
podman rm "$NAME-server-run" >/dev/null
[[ ! -e $server_runs/mlflow.db ]] || fail "the run wrote an embedded mlflow.db instead of logging to the server"
experiment=$(http GET "/api/2.0/mlflow/experiments/get-by-name?experiment_name=container-check-server" admin "$password")
[[ $experiment == 200* ]] || fail "the experiment is not on the server: ${experiment:0:100}"
experiment_id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1].split(" ", 1)[1])["experiment"]["experiment_id"])' "$experiment")
found=$(http POST /api/2.0/mlflow/runs/search admin "$password" "{\"experiment_ids\": [\"$experiment_id\"]}")
python3 - "$found" "$server_runs/results.jsonl" <<'EOF' || fail "the server's runs do not match the records"
import json, sys
status, body = sys.argv[1].split(" ", 1)
runs = {r["info"]["run_id"]: r["info"]["status"] for r in json.loads(body).get("runs", [])} if status == "200" else {}
lines = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
records = {r["tracker_run_id"] for r in lines if r["status"] != "skipped"}  # a skipped cell's run is set aside
print(f"server: {len(runs)} runs ({', '.join(sorted(set(runs.values())))}); records: {len(records)} cells")
sys.exit(0 if runs and records <= set(runs) and set(runs.values()) == {"FINISHED"} else 1)
EOF
end_stage
