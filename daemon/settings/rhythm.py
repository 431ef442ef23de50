"""Sections of the daemon's time: the scheduler, notices, the person's schedules, sleep."""

from __future__ import annotations

from pydantic import Field, field_validator

from daemon.settings.core import Section


class SchedulerSettings(Section):
    nightly_sleep: str = Field("03:30", pattern=r"^([01]\d|2[0-3]):[0-5]\d$")
    timezone: str | None = None

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value!r} (use an IANA name such as 'Europe/London')"
            ) from None
        return value


class NoticesSettings(Section):
    # "22:00-07:00" in scheduler.timezone; empty: no quiet hours.
    quiet_hours: str = Field("", pattern=r"^$|^([01]\d|2[0-3]):[0-5]\d-([01]\d|2[0-3]):[0-5]\d$")
    # A desktop notification per notice: the text is appended as the last argument (no shell).
    notify_command: list[str] = Field(default_factory=list)
    notify_timeout_s: float = Field(10.0, gt=0, le=120)
    greeting: bool = True
    # HEARTBEAT.md's instructions are checked on the journal heartbeat (one model call each),
    # at most once in this many minutes.
    checklist: bool = True
    checklist_minutes: float = Field(60.0, gt=0)

    @field_validator("quiet_hours")
    @classmethod
    def _a_window(cls, value: str) -> str:
        if value and value[:5] == value[6:]:
            raise ValueError(f"quiet hours {value!r} start and end at the same time")
        return value


class ScheduleSettings(Section):
    """Schedules the agent keeps for the person (`schedule`, `reverie schedule`)."""

    # Schedules active or waiting for approval at once; adding one more is refused.
    max_schedules: int = Field(5000, ge=1)
    # The time of day a phrase that names a day but no time means ("tomorrow", "every monday").
    default_time: str = Field("09:00", pattern=r"^([01]\d|2[0-3]):[0-5]\d$")
    # The shortest repetition "every N minutes/hours" may ask for.
    min_interval_minutes: float = Field(5.0, gt=0)
    # A firing later than this after its due time is marked late (by how much) in its notice.
    late_after_s: float = Field(60.0, ge=0)
    # A repeating schedule missed while the daemon was down fires once at start (never more);
    # false: it waits for its next regular time. A missed one-off always fires once, late.
    catch_up: bool = True


class SleepSettings(Section):
    """The sleep cycle; its nightly time and time zone are `scheduler.nightly_sleep` / `timezone`."""

    nightly: bool = True
    # The nightly start is moved later by a random amount up to this, so it is not clockwork.
    jitter_minutes: float = Field(20.0, ge=0, le=240)
    # A failing phase is retried this many times, waiting retry_base_s, doubling, then skipped.
    phase_retries: int = Field(2, ge=0, le=10)
    retry_base_s: float = Field(30.0, ge=0)
    retry_max_s: float = Field(600.0, ge=0)
    # Wind-down: after `compaction_approaching` the trunk is told it is tired; the cycle starts at
    # the end of the first turn it finishes, or anyway once the context reaches hard_threshold
    # of the window or wind_down_turns turns have ended since the note.
    hard_threshold: float = Field(0.92, gt=0.1, le=1.0)
    wind_down_turns: int = Field(3, ge=1, le=50)
    # WAKE.md: the longest letter (tokens) and how many memories are pulled into its weaving.
    wake_tokens: int = Field(600, ge=100, le=4000)
    wake_memories: int = Field(8, ge=0, le=50)
    # A cycle that ran within this many hours is not repeated by the nightly schedule.
    min_gap_hours: float = Field(6.0, ge=0)

    # --- maintenance and dreams (issue 10, part B) ---
    # Session summaries (and chunks of unsummarised sessions) older than this are folded
    # into one summary per month; the sources stay, linked to it.
    fold_after_days: int = Field(30, ge=1)
    # An explicit fact of trusted origin whose importance reaches this is pinned in FACTS.md.
    promote_min_importance: float = Field(0.9, ge=0, le=1)
    # A fact about a dated plan is retired this many days after its last date has passed.
    retire_after_days: int = Field(7, ge=0)
    # VACUUM when at least this fraction of the database's pages is free (else only checkpoint).
    vacuum_min_free_fraction: float = Field(0.1, ge=0, le=1)
    # Dreams: at most this many revisions per night; a revision deleting more than this
    # fraction of a file's lines is rejected.
    dreams_max_revisions: int = Field(3, ge=0)
    dreams_max_delete_fraction: float = Field(0.5, gt=0, le=1)
    # How much recent material (summaries, facts) a dream reads, in tokens.
    dreams_material_tokens: int = Field(6000, ge=200)
    # --- end of maintenance and dreams ---
    # Mining: the day's sessions read for facts said in passing (the dreams model when there
    # is a key, extractive rules offline); at most this many messages a night, in batches of
    # this many tokens for the model.
    mining: bool = True
    mining_max_messages: int = Field(5000, ge=1)
    mining_batch_tokens: int = Field(6000, ge=500)
    # Promotion by use: a mined fact recalled this many times (or tagged important) is pinned
    # in FACTS.md when it is the person's word (proposed when the agent's, never when a
    # tool's), at most max_promoted mined facts pinned at once.
    promote_min_uses: int = Field(5, ge=1)
    max_promoted: int = Field(20, ge=0)
