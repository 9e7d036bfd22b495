"""Project hygiene that CI must keep true: lint clean, README and CI agree."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from crawler import settings

REPO = Path(__file__).resolve().parent.parent


def test_ruff_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--quiet", str(REPO)],
        capture_output=True, text=True, check=False, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    return re.findall(r"```sh\n(.+?)\n```", text)


def test_ci_runs_the_readme_test_command() -> None:
    install_and_demo, tests = _readme_commands()[:2]
    assert "demo" in install_and_demo and "pytest" in tests
    ci_lines = (REPO / ".ci" / "run").read_text().splitlines()
    assert tests in ci_lines, "the README's test command is not verbatim in .ci/run"


def test_settings_disable_code_execution_endpoints() -> None:
    assert settings.REMOTE_CONTROL_ENABLED is False
    assert settings.TELNETCONSOLE_ENABLED is False
    assert settings.USER_AGENT.startswith(settings.ROBOTSTXT_USER_AGENT + "/")
    assert re.fullmatch(r"[A-Za-z_-]+", settings.ROBOTSTXT_USER_AGENT)
