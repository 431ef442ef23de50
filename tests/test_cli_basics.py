"""init, doctor, journal, status without a daemon — through the real CLI entry point."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from daemon.cli import main


def test_init_scaffolds_a_private_home(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "agent"
    assert main(["init", str(home)]) == 0
    said = capsys.readouterr().out
    assert (
        f"start it with: reverie run --home {home}"
        f" (or ./scripts/run-daemon.sh --home {home} in a checkout)"
    ) in said
    assert (home / "reverie.toml").exists()
    for name in ("SOUL.md", "STYLE.md", "REGISTER.md", "NEUROLOGY.md", "USER.md"):
        assert (home / "persona" / name).stat().st_size > 0
    assert (home / "PERSONALITY_MATRIX.md").exists() and list((home / "topics").glob("*.md"))
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    # Edits survive a second init.
    (home / "persona" / "SOUL.md").write_text("my own soul")
    assert main(["init", str(home)]) == 0
    assert (home / "persona" / "SOUL.md").read_text() == "my own soul"
    assert "already exists" in capsys.readouterr().out


def test_init_over_a_file_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "a-file"
    target.write_text("not a home")
    assert main(["init", str(target)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"reverie: cannot create home {target}: it exists and is not a directory"
    assert target.read_text() == "not a home"


def test_doctor_reports_each_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "agent"
    main(["init", str(home)])
    capsys.readouterr()
    code = main(["doctor", "--home", str(home), "--json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    assert code == 0
    assert "sqlite-vec" not in checks
    assert checks["fts5"]["status"] == "ok"
    assert checks["tokenizer"]["status"] == "ok" and "tiktoken" in checks["tokenizer"]["detail"]
    assert checks["api key"]["status"] == "warn" and "offline" in checks["api key"]["detail"]
    assert checks["home"]["status"] == "ok"
    assert checks["socket"]["detail"] == (
        f"{home / 'run' / 'reverie.sock'} (daemon not running; start it with `reverie run`"
        " (or `./scripts/run-daemon.sh` in a checkout))"
    )


def test_doctor_names_the_embedder_in_use_and_a_broken_matrix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "agent"
    main(["init", str(home)])
    capsys.readouterr()
    monkeypatch.setenv("REVERIE_EMBEDDER", "hash")
    matrix = home / "PERSONALITY_MATRIX.md"
    matrix.write_text(matrix.read_text().replace('"topics"', '"topics" oops', 1))
    code = main(["doctor", "--home", str(home), "--json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    assert code == 1
    assert checks["embedder"]["status"] == "ok" and "'hash'" in checks["embedder"]["detail"]
    assert checks["topics"]["status"] == "fail" and "not valid JSON" in checks["topics"]["detail"]


def test_doctor_fails_on_an_impossible_setup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "agent"
    main(["init", str(home)])
    (home / "reverie.toml").write_text("[models.trunk]\nprovider = 'anthropic'\n")
    code = main(["doctor", "--home", str(home)])
    out, err = capsys.readouterr()
    assert code == 1
    assert "api key" in err and "ANTHROPIC_API_KEY" in out


def test_status_without_a_daemon(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--home", str(tmp_path / "h"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["running"] is False


def test_journal_reads_entries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "h"
    main(["init", str(home)])
    (home / "journal" / "2026-01-01.jsonl").write_text(
        json.dumps(
            {
                "ts": "2026-01-01T10:00:00Z",
                "summary": "planned the garden",
                "decisions": ["tomatoes first"],
            }
        )
        + "\n"
    )
    capsys.readouterr()
    assert main(["journal", "--home", str(home), "--tail", "5"]) == 0
    out = capsys.readouterr().out
    assert "planned the garden" in out and "tomatoes first" in out


def test_journal_day_json_and_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "h"
    main(["init", str(home)])
    day1 = [
        {
            "ts": "2026-01-01T10:00:00+00:00",
            "summary": "planned the garden",
            "trigger": "heartbeat",
            "source": "model",
        }
    ]
    day2 = [
        {"ts": "2026-01-02T09:00:00+00:00", "summary": "ordered seeds", "tags": ["garden"]},
        {
            "ts": "2026-01-02T11:00:00+00:00",
            "summary": "built the cold frame",
            "files_touched": ["plans/frame.md"],
        },
    ]
    (home / "journal" / "2026-01-01.jsonl").write_text("".join(json.dumps(e) + "\n" for e in day1))
    # The last line was torn by a crash: it is skipped, never shown half.
    (home / "journal" / "2026-01-02.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in day2) + '{"ts": "2026-01-02T12:'
    )
    capsys.readouterr()
    assert main(["journal", "--home", str(home), "--day", "2026-01-02", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["summary"] for r in rows] == ["ordered seeds", "built the cold frame"]
    assert rows[0]["schema"] == 1 and rows[1]["files_touched"] == ["plans/frame.md"]
    assert main(["journal", "--home", str(home), "--tail", "2"]) == 0
    out = capsys.readouterr().out
    assert (
        "planned the garden" not in out
        and "ordered seeds" in out
        and "files: plans/frame.md" in out
    )
    assert main(["journal", "--home", str(home), "--day", "last tuesday"]) == 2
    assert "is not a date" in capsys.readouterr().err
    assert main(["journal", "--home", str(home), "--tail", "0"]) == 2
    assert main(["journal", "--home", str(home), "--day", "2025-12-31"]) == 0
    assert "no journal entries for 2025-12-31" in capsys.readouterr().out


def test_a_direct_memory_command_gives_blas_half_the_cores(tmp_path: Path) -> None:
    """The command that computes caps numpy's BLAS in its own process (the environment does not)."""
    import os
    import subprocess
    import sys

    probe = (
        "import json, sys\n"
        "from threadpoolctl import threadpool_info\n"
        "from daemon.cli import main\n"
        "from daemon.memory.threads import default_threads\n"
        f"code = main(['memory', 'stats', '--home', {str(tmp_path / 'home')!r}])\n"
        "blas = [p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas']\n"
        "print(json.dumps([code, blas, default_threads()]), file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    r = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120
    )
    code, blas, want = json.loads(r.stderr.strip().splitlines()[-1])
    assert code == 0 and blas == [want], r.stderr


def test_blas_is_sized_before_numpy_starts_its_pool(tmp_path: Path) -> None:
    """The pool is sized by the environment before numpy loads (a pool shrunk afterwards has
    already started its spinning threads); a person's own setting wins."""
    import os
    import subprocess
    import sys

    probe = (
        "import json, os, sys\n"
        "from daemon.cli import main\n"
        f"code = main(['memory', 'stats', '--home', {str(tmp_path / 'home')!r}])\n"
        "print(json.dumps([code, os.environ.get('OPENBLAS_NUM_THREADS')]), file=sys.stderr)\n"
    )
    base = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    from daemon.memory.threads import default_threads

    for extra, want in (({}, str(default_threads())), ({"OPENBLAS_NUM_THREADS": "3"}, "3")):
        r = subprocess.run(
            [sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            env={**base, **extra},
            timeout=120,
        )
        code, seen = json.loads(r.stderr.strip().splitlines()[-1])
        assert code == 0 and seen == want, r.stderr
