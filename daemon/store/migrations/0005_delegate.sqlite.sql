-- Delegate: one row per fork session (its lineage), so a fork tree can be traced, limited,
-- recovered after a crash (a row left `running` is marked failed at start) and retained.
CREATE TABLE forks (
    id TEXT PRIMARY KEY,             -- the fork's session id (sessions/forks/<id>.jsonl)
    parent_session_id TEXT NOT NULL, -- the session that called `delegate` (trunk or fork)
    parent_turn_id TEXT NOT NULL,
    parent_call_id TEXT,             -- the `delegate` tool call in the parent's transcript
    root_session_id TEXT NOT NULL,   -- the trunk session at the top of the tree
    depth INTEGER NOT NULL,          -- 1 for a fork of the trunk
    task TEXT NOT NULL,
    status TEXT NOT NULL,            -- running | complete | incomplete | stopped | cancelled | failed | vetoed
    outcome TEXT,                    -- task_complete's outcome (success | partial | failed)
    summary TEXT,
    stop_reason TEXT,
    tokens INTEGER NOT NULL DEFAULT 0,
    transcript_path TEXT NOT NULL,
    started_at TEXT NOT NULL,
    ended_at TEXT,
    reported INTEGER NOT NULL DEFAULT 1, -- 0: ended by a restart, not yet told to its parent
    retained TEXT                    -- NULL (live) | archived | pruned
);
CREATE INDEX forks_parent ON forks(parent_session_id, parent_turn_id);
CREATE INDEX forks_status ON forks(status);
