"""The offline journal entry is about the day, not about the offline model's own replies."""

from __future__ import annotations

from daemon.models.offline_journal import journal_entry

OFFLINE_REPLY = (
    "I'm Reverie's built-in offline model, not a language model: no model provider is configured, "
    "so I can't hold a real conversation. Set ANTHROPIC_API_KEY, or configure a provider (an "
    "OpenAI-compatible endpoint such as llama.cpp or Ollama) in reverie.toml, to talk to a real "
    "model. You said: “We decided to repaint the kitchen green next week.”"
)


def message(*lines: str) -> str:
    return "<<<TRANSCRIPT\n" + "\n".join(lines) + "\nTRANSCRIPT>>>"


def test_the_offline_models_self_introduction_leaves_no_trace_in_the_entry() -> None:
    entry = journal_entry(
        message(
            "[user] We decided to repaint the kitchen green next week. Is the paint shop open on Sunday?",
            f"[assistant] {OFFLINE_REPLY}",
            "[user] The brushes are in the shed at plan.md",
            f"[assistant] {OFFLINE_REPLY}",
        )
    )
    assert entry["files_touched"] == ["plan.md"]
    assert "offline" not in entry["summary"].lower() and "You said" not in entry["summary"]
    assert entry["decisions"] == ["We decided to repaint the kitchen green next week."]
    assert entry["open_questions"] == ["Is the paint shop open on Sunday?"]
    assert not {"model", "provider", "llama"} & set(entry["tags"])


def test_the_offline_session_summary_is_about_the_session_not_the_offline_model() -> None:
    from daemon.models.offline import summarise

    result = summarise(
        message(
            "[user] We decided to move the hives to the orchard in April.",
            f"[assistant] {OFFLINE_REPLY}",
            "[user] The queen in hive two is marked blue.",
            f"[assistant] {OFFLINE_REPLY}",
        )
    )
    assert not {"offline", "model", "provider", "llama", "anthropic"} & set(
        result["slug"].split("-")
    )
    assert "offline" not in result["summary"].lower()
    assert result["decisions"] == ["We decided to move the hives to the orchard in April."]
    assert "hive" in result["slug"] or "hives" in result["slug"]
