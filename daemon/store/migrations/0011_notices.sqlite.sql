-- The outbox: what the agent has to tell its person (a reminder, a task's result, the
-- morning greeting, a checklist finding). A notice is kept until the person acknowledges
-- it; `delivered_at` is set once a `notice` frame was written to one of their clients.
-- `key` is unique: a firing that posts again after a crash finds its notice and creates
-- nothing, so the person is told once.
CREATE TABLE notices (
    id TEXT PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT 'agent',
    created_at TEXT NOT NULL,
    due_at TEXT,
    late_s REAL NOT NULL DEFAULT 0,
    schedule_id TEXT,
    delivered_at TEXT,
    acknowledged_at TEXT
);
CREATE INDEX notices_undelivered ON notices(created_at) WHERE delivered_at IS NULL;
CREATE INDEX notices_unacknowledged ON notices(created_at) WHERE acknowledged_at IS NULL;
