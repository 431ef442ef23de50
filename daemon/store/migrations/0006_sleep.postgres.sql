-- The sleep cycle's checkpoints: one row per cycle and one per phase run, so a crash or a
-- SIGTERM mid-cycle resumes at the first phase without a completed checkpoint and never
-- repeats a completed one.
CREATE TABLE sleep_cycles (
    id TEXT PRIMARY KEY,
    reason TEXT NOT NULL,            -- nightly | compaction | manual
    session_id TEXT NOT NULL,        -- the trunk session put to sleep
    started_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,            -- running | done | failed
    new_session_id TEXT,             -- the trunk session woken into
    woke_early BIGINT NOT NULL DEFAULT 0,
    deferred TEXT,                   -- JSON list of optional phases deferred to the next cycle
    resumed BIGINT NOT NULL DEFAULT 0  -- how many times it was resumed after a restart
);
CREATE INDEX sleep_cycles_status ON sleep_cycles(status, started_at);

CREATE TABLE sleep_phases (
    cycle_id TEXT NOT NULL REFERENCES sleep_cycles(id),
    phase TEXT NOT NULL,
    seq BIGINT NOT NULL,            -- position in the cycle
    status TEXT NOT NULL,            -- running | done | skipped | deferred
    attempts BIGINT NOT NULL DEFAULT 0,
    started_at TEXT,
    finished_at TEXT,
    report TEXT,                     -- the phase's PhaseReport as JSON (done)
    error TEXT,                      -- the last error (skipped)
    PRIMARY KEY (cycle_id, phase)
);
