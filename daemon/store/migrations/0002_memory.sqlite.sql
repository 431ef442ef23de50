-- Memory index: facts, profile facts, session summaries and transcript chunks in one table,
-- an external-content FTS5 index kept in step by triggers, and embeddings cached by
-- (content hash, model) so re-import and reindex never recompute a vector they already have.
-- `version` is stamped from kv 'memory.generation' by every writer, so a reader (the daemon
-- while a CLI import runs) refreshes its in-memory matrix incrementally.
CREATE TABLE memories (
    rowid INTEGER PRIMARY KEY,
    uid TEXT NOT NULL UNIQUE,        -- fact:<id> | summary:<session> | chunk:<session>:<seq> ...
    kind TEXT NOT NULL,              -- fact | profile | summary | chunk
    text TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    tags TEXT NOT NULL DEFAULT '',   -- space-separated, also indexed
    importance REAL NOT NULL DEFAULT 0.5,
    origin TEXT NOT NULL,            -- person | agent | tool | system | import
    created_at TEXT NOT NULL,        -- ISO-8601 UTC
    valid_from TEXT,
    retired_at TEXT,
    supersedes TEXT,
    superseded_by TEXT,
    session_id TEXT,
    message_ids TEXT NOT NULL DEFAULT '[]',
    source TEXT NOT NULL DEFAULT '',
    content_hash TEXT NOT NULL,
    explicit INTEGER NOT NULL DEFAULT 0,
    meta TEXT NOT NULL DEFAULT '{}',
    version INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX memories_kind_created ON memories(kind, created_at);
CREATE INDEX memories_session ON memories(session_id);
CREATE INDEX memories_version ON memories(version);
CREATE INDEX memories_hash ON memories(content_hash);
CREATE INDEX memories_supersedes ON memories(supersedes);

CREATE VIRTUAL TABLE memories_fts USING fts5(
    title, text, tags,
    content='memories', content_rowid='rowid',
    tokenize='porter unicode61 remove_diacritics 2'
);

CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, title, text, tags) VALUES (new.rowid, new.title, new.text, new.tags);
END;
CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, title, text, tags) VALUES ('delete', old.rowid, old.title, old.text, old.tags);
END;
CREATE TRIGGER memories_au AFTER UPDATE OF title, text, tags ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, title, text, tags) VALUES ('delete', old.rowid, old.title, old.text, old.tags);
    INSERT INTO memories_fts(rowid, title, text, tags) VALUES (new.rowid, new.title, new.text, new.tags);
END;

-- The truth for vectors: a plain BLOB table (works without sqlite-vec). float32, L2-normalised.
CREATE TABLE embeddings (
    content_hash TEXT NOT NULL,
    model TEXT NOT NULL,
    dim INTEGER NOT NULL,
    vector BLOB NOT NULL,
    version INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (content_hash, model)
);
CREATE INDEX embeddings_model_version ON embeddings(model, version);

-- Which messages of a session have been cut into chunks already (index_session is incremental).
CREATE TABLE memory_chunked (
    session_id TEXT PRIMARY KEY,
    upto_seq INTEGER NOT NULL
);
