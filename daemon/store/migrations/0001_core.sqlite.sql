-- Core tables: sessions, messages (index of the JSONL transcripts), usage ledger,
-- per-turn context reports, key/value state (schedule, checkpoints).
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,              -- trunk | fork | imported
    parent_id TEXT,
    transcript_path TEXT NOT NULL,
    started_at TEXT NOT NULL,
    ended_at TEXT,
    title TEXT,
    summary_path TEXT,
    summarised_at TEXT,
    summarised_upto INTEGER NOT NULL DEFAULT 0,
    meta TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX sessions_started ON sessions(started_at);

CREATE TABLE messages (
    rowid INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    msg_id TEXT NOT NULL,            -- transcript id (imported id for imported sessions)
    seq INTEGER NOT NULL,            -- position in the session
    ts TEXT NOT NULL,
    role TEXT NOT NULL,              -- user | assistant | tool
    speaker TEXT,
    content TEXT NOT NULL,
    turn_id TEXT,
    UNIQUE(session_id, msg_id)
);
CREATE INDEX messages_session_seq ON messages(session_id, seq);
CREATE INDEX messages_ts ON messages(ts);

CREATE TABLE usage_ledger (
    id INTEGER PRIMARY KEY,
    ts TEXT NOT NULL,
    day TEXT NOT NULL,               -- local date the spend counts against
    role TEXT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    session_id TEXT,
    turn_id TEXT
);
CREATE INDEX usage_day ON usage_ledger(day);

CREATE TABLE turn_reports (
    turn_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    ts TEXT NOT NULL,
    context_tokens INTEGER NOT NULL,
    report TEXT NOT NULL             -- JSON breakdown per layer
);
CREATE INDEX turn_reports_ts ON turn_reports(ts);

CREATE TABLE kv (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
