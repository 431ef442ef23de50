-- Open threads (issue 37): what the agent promised, what the person asked that was left
-- unanswered, and the person's plans with a date. Each keeps the message that opened it; it
-- stays open (and in the context) until resolved — done, answered — or expired with a note
-- after `[threads] expire_days`.
CREATE TABLE threads (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,              -- promise | question | plan
    text TEXT NOT NULL,              -- the sentence that opened it
    session_id TEXT NOT NULL,
    opened_by TEXT NOT NULL,         -- message id (messages.msg_id) that opened it
    opened_at TEXT NOT NULL,
    due TEXT,                        -- local date (YYYY-MM-DD) or NULL
    status TEXT NOT NULL DEFAULT 'open',  -- open | resolved | expired
    resolved_at TEXT,
    resolved_by TEXT,                -- message id that closed it (NULL for an expiry)
    note TEXT NOT NULL DEFAULT ''
);
CREATE INDEX threads_status ON threads(status, opened_at);
CREATE UNIQUE INDEX threads_opened ON threads(opened_by, kind, text);
