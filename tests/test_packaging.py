"""environment.yml and pyproject.toml name the same packages with the same pins."""

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in ("course", "dev"):
        reqs += project["optional-dependencies"][extra]
    in_pyproject = {_name(r): r.replace(" ", "") for r in reqs}
    in_env = {}
    for line in (ROOT / "environment.yml").read_text().splitlines():
        m = re.match(r" {6}- (?!-e )(\S+)", line)  # entries of the pip: section
        if m and not line.strip().startswith("#"):
            in_env[_name(m.group(1))] = m.group(1)
    assert in_env == in_pyproject


def test_extras_hold_what_the_course_needs():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    course = {_name(r) for r in extras["course"]}
    assert {"jupyterlab", "ipywidgets", "papermill", "nbval", "deepspeed"} <= course
    assert {"pytest", "pytest-timeout", "ruff", "nbstripout"} <= {_name(r) for r in extras["dev"]}
