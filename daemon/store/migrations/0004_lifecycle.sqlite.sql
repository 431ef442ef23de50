-- Lifecycle: scheduled jobs' persisted state (last run, for catch-up after downtime) and
-- the link between a trunk session and the one it continues (session switching).
CREATE TABLE schedule_state (
    job TEXT PRIMARY KEY,
    last_run TEXT,                   -- when the last run started (the schedule's clock)
    last_status TEXT,                -- ok | failed | skipped
    last_result TEXT,
    next_run TEXT,
    runs INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT NOT NULL
);

ALTER TABLE sessions ADD COLUMN previous_id TEXT;
ALTER TABLE sessions ADD COLUMN switch_reason TEXT;
