"""Checks the deployment files without a container engine.

What it checks is what a typo would break on the first `docker compose up`:
the YAML parses; every path the Dockerfile copies exists and is not excluded
by .dockerignore; what its build stage copies is enough for cargo to build
Condenser (every workspace member, every declared target); the environment each file gives Condenser (Dockerfile ENV,
compose services, the sidecar pod) passes `condenser check-config`;
nginx's upstream servers are the compose services on the port they listen
on; tracing.yaml points only compose's instances at a collector it runs.
The nginx configuration itself runs for real in tests/api/fleet.rs.

Usage: python docker/check.py path/to/condenser-binary
"""

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
failures = []


def fail(message):
    failures.append(message)
    print(f"FAIL {message}", flush=True)


def ok(message):
    print(f"ok   {message}", flush=True)


def dockerfile_lines():
    """Instructions of the Dockerfile, continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def ignored(path):
    patterns = [
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return any(fnmatch.fnmatch(path, p) or path.startswith(p + "/") for p in patterns)


def check_dockerfile_copies():
    for line in dockerfile_lines():
        if not line.startswith("COPY ") or "--from=" in line:
            continue
        sources = line.split()[1:-1]
        for source in sources:
            if not (ROOT / source).exists():
                fail(f"Dockerfile copies {source}, which does not exist")
            elif ignored(source):
                fail(f"Dockerfile copies {source}, which .dockerignore excludes")
            else:
                ok(f"Dockerfile copies {source}")


def build_stage_copies():
    """(source, destination) of each COPY in the Dockerfile's first stage."""
    copies = []
    for line in dockerfile_lines():
        if line.startswith("FROM ") and copies:
            break
        if line.startswith("COPY ") and "--from=" not in line:
            *sources, destination = line.split()[1:]
            copies += [(source, destination) for source in sources]
    return copies


def check_build_context():
    """`cargo build --locked --bin condenser`, as the build stage runs it,
    from only what the build stage copies: a workspace member or a declared
    target it leaves out fails the image's build, and nothing else here
    would notice without a container engine. The checkout's target
    directory keeps the dependencies already built (debug, not release:
    what is checked is the files, not the optimizer)."""
    with tempfile.TemporaryDirectory() as context:
        for source, destination in build_stage_copies():
            target = Path(context) / destination
            if destination.endswith("/"):
                target = target / Path(source).name
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, target, dirs_exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(ROOT / source, target)
        built = subprocess.run(
            ["cargo", "build", "--quiet", "--locked", "--offline", "--bin", "condenser"],
            cwd=context, capture_output=True, text=True,
            env={**os.environ, "CARGO_TARGET_DIR": str(ROOT / "target")},
        )
    if built.returncode != 0:
        reason = next((line for line in built.stderr.splitlines() if line.startswith("error")), "")
        fail(f"the Dockerfile's build stage copies too little to build: {reason}")
    else:
        ok("the Dockerfile's build stage copies what `cargo build --locked` needs")


def check_release_build_inputs():
    """The build stage runs scripts/build-release, which runs
    scripts/pgo-train, which reads files of bench/: each of those the
    scripts name must be copied too, or the image's build stops at the
    training load."""
    copied = [Path(source) for source, _ in build_stage_copies()]
    scripts = [ROOT / "scripts/build-release", ROOT / "scripts/pgo-train"]
    named = set()
    for script in scripts:
        named |= set(re.findall(r"\b((?:scripts|bench)/[\w.-]+)", script.read_text()))
    # Documents the scripts' comments cite are not read.
    for name in sorted(n for n in named if not n.endswith(".md")):
        if any(Path(name) == source or source in Path(name).parents for source in copied):
            ok(f"the build stage copies {name}, which the release build reads")
        else:
            fail(f"the build stage does not copy {name}, which scripts/build-release needs")


def dockerfile_env():
    env = {}
    for line in dockerfile_lines():
        if line.startswith("ENV "):
            for pair in line[4:].split():
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def expand(value):
    """Compose's ${NAME:-default}, with the default."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(value))


def check_config(binary, label, env, config=None):
    args = [binary] + (["--config", str(config)] if config else []) + ["check-config"]
    result = subprocess.run(args, env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, cwd="/")
    if result.returncode == 0:
        ok(f"{label}: condenser check-config accepts its environment")
    else:
        fail(f"{label}: condenser check-config refused it: {result.stderr.strip()}")


def check_compose(binary):
    compose = yaml.safe_load((ROOT / "docker/compose.yaml").read_text())
    services = compose["services"]
    instances = {name: s for name, s in services.items() if name.startswith("condenser")}
    if len(instances) < 2:
        fail("compose.yaml should run at least two Condenser instances")
    ports = set()
    for name, service in instances.items():
        env = {k: expand(v) for k, v in service["environment"].items()}
        check_config(binary, f"compose {name}", env, ROOT / "config/default.toml")
        ports.add(env["CONDENSER_LISTEN"].rsplit(":", 1)[1])
        if service.get("build", {}).get("dockerfile") != "Dockerfile":
            fail(f"compose {name} does not build the Dockerfile")
    for volume in services["nginx"]["volumes"]:
        source = volume.split(":")[0]
        if not (ROOT / "docker" / source).exists():
            fail(f"compose nginx mounts {source}, which does not exist")
    servers = set(re.findall(r"^\s*server\s+([\w.-]+:\d+)", (ROOT / "docker/nginx.conf").read_text(), re.M))
    expected = {f"{name}:{port}" for name in instances for port in ports}
    if servers == expected:
        ok(f"nginx.conf balances over {sorted(servers)}")
    else:
        fail(f"nginx.conf servers {sorted(servers)} are not the compose instances {sorted(expected)}")


def check_tracing(binary):
    """docker/tracing.yaml, laid over compose.yaml: it names only existing
    instances, points them at a collector it runs, on OTLP/HTTP's port,
    and the merged environment still passes check-config."""
    base = yaml.safe_load((ROOT / "docker/compose.yaml").read_text())["services"]
    overlay = yaml.safe_load((ROOT / "docker/tracing.yaml").read_text())["services"]
    collectors = {name for name in overlay if not name.startswith("condenser")}
    for name, service in overlay.items():
        if not name.startswith("condenser"):
            continue
        if name not in base:
            fail(f"tracing.yaml configures {name}, which compose.yaml does not run")
            continue
        endpoint = service["environment"].get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
        match = re.fullmatch(r"http://([\w.-]+):4318", endpoint)
        if not match or match.group(1) not in collectors:
            fail(f"tracing.yaml {name}: OTEL_EXPORTER_OTLP_ENDPOINT {endpoint!r} is not a collector it runs, on 4318")
        else:
            ok(f"tracing.yaml {name} sends traces to {match.group(1)}:4318")
        env = {k: expand(v) for k, v in base[name]["environment"].items()}
        env.update({k: str(v) for k, v in service["environment"].items()})
        check_config(binary, f"compose+tracing {name}", env, ROOT / "config/default.toml")


def check_sidecar(binary):
    pod = yaml.safe_load((ROOT / "docker/sidecar/pod.yaml").read_text())
    for container in pod["spec"]["containers"]:
        if container["image"].startswith("condenser"):
            env = {e["name"]: e["value"] for e in container["env"]}
            check_config(binary, "sidecar condenser", env)


def main():
    binary = str(Path(sys.argv[1]).resolve())
    check_dockerfile_copies()
    check_build_context()
    check_release_build_inputs()
    check_config(binary, "Dockerfile ENV", dockerfile_env(), ROOT / "config/default.toml")
    check_compose(binary)
    check_tracing(binary)
    check_sidecar(binary)
    if failures:
        print(f"{len(failures)} deployment check(s) failed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
