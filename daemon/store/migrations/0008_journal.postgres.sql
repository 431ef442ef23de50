-- The journal heartbeat: how far into each session's transcript the journal has written
-- entries (a byte offset at a line boundary), so a heartbeat with nothing new since the
-- last entry writes nothing and calls no model. The entry itself records the same span,
-- so a crash between the append and this update is repaired at start.
CREATE TABLE journal_cursors (
    session_id TEXT PRIMARY KEY,
    byte_offset BIGINT NOT NULL DEFAULT 0,
    entry_id TEXT,
    updated_at TEXT NOT NULL
);
