-- Schedules the agent keeps for its person: reminders and tasks, once or repeating.
-- `next_due` (UTC ISO, whole seconds) is the one instant the keeper waits for; NULL once a
-- schedule is done or cancelled. `rule` is the repetition (JSON, `daemon.schedule.when`),
-- NULL for a one-off. `requested_by`: person, agent, or tool (proposed on the strength of
-- text a tool brought in — such a schedule is `pending` until the person approves it).
CREATE TABLE schedules (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    phrase TEXT NOT NULL,
    rule TEXT,
    next_due TEXT,
    status TEXT NOT NULL,
    requested_by TEXT NOT NULL,
    session_id TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    fired_count BIGINT NOT NULL DEFAULT 0,
    last_fired_at TEXT
);
CREATE INDEX schedules_next_due ON schedules(next_due) WHERE status = 'active';
-- One row per firing, keyed by the due time it answered: a firing after a crash finds its
-- row and its notice (key `fire:<schedule_id>:<due ISO>`) and does nothing twice.
-- status: delivered (a reminder's notice is in the outbox), running (a task's fork started),
-- done / failed (a task finished), skipped (the spend cap stopped a task).
CREATE TABLE schedule_fires (
    schedule_id TEXT NOT NULL,
    due_at TEXT NOT NULL,
    fired_at TEXT NOT NULL,
    late_s DOUBLE PRECISION NOT NULL DEFAULT 0,
    catch_up BIGINT NOT NULL DEFAULT 0,
    status TEXT NOT NULL,
    notice_id TEXT,
    result TEXT,
    finished_at TEXT,
    noted_at TEXT,
    PRIMARY KEY (schedule_id, due_at)
);
