"""The shipped defaults: the documented reverie.toml, the starter persona and the topic matrix."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from daemon.paths import PERSONA_FILES, Home, shipped_dir
from daemon.settings import Settings, load_settings
from daemon.topics.router import TopicRouter

REFERENCE = shipped_dir() / "reverie.toml"
_COMMENTED = re.compile(r"^# ((\[[^\]]+\](\s+#.*)?)|([A-Za-z_][A-Za-z0-9_]*\s*=\s.*))$")


def uncommented() -> dict[str, Any]:
    lines = [line[2:] for line in REFERENCE.read_text().splitlines() if _COMMENTED.match(line)]
    return tomllib.loads("\n".join(lines))


def leaves(model: BaseModel, prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out.extend(leaves(value, f"{prefix}{name}."))
        else:
            out.append((f"{prefix}{name}", value))
    return out


def test_loading_the_reference_yields_the_defaults() -> None:
    assert REFERENCE.read_text().startswith("# Reverie defaults — every key is optional")
    assert load_settings(None, environ={}) == Settings()


def test_uncommenting_every_line_yields_the_defaults() -> None:
    assert Settings.model_validate(uncommented()) == Settings()


def test_every_setting_is_documented() -> None:
    data = uncommented()
    text = REFERENCE.read_text()
    missing = []
    for path, default in leaves(Settings()):
        node: Any = data
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        name = path.rsplit(".", 1)[-1]
        if node is None and not (
            default is None and re.search(rf"\b{name}\b`? is unset by default", text)
        ):
            missing.append(path)
    assert not missing, f"config/reverie.toml does not document: {missing}"


def test_starter_persona_and_topics_are_complete(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.ensure()
    for name in PERSONA_FILES:
        assert len((home.persona_dir / name).read_text().split()) >= 80, name
    router = TopicRouter(home, Settings().topics)
    assert router.problems == ()
    assert len(router.topics) >= 12
    owners: dict[tuple[str, ...], str] = {}
    for topic in router.topics:
        assert len(topic.body.split()) >= 120, f"topic {topic.id} is too thin"
        for trigger in topic.spec.triggers:
            assert trigger.key not in owners, (
                f"trigger {trigger.text!r} of {topic.id} also triggers {owners.get(trigger.key)}"
            )
            owners[trigger.key] = topic.id
