-- Sleep maintenance and dreams.
-- memory_folds: which day-level memory (a session summary, or a chunk of a session with no
-- summary) was folded into which monthly summary. Sources are kept; this only links them.
CREATE TABLE memory_folds (
    source_uid TEXT PRIMARY KEY,
    month_uid TEXT NOT NULL,         -- month:YYYY-MM or month:YYYY-MM:imported
    folded_at TEXT NOT NULL
);
CREATE INDEX memory_folds_month ON memory_folds(month_uid);

-- Explicit facts pinned into FACTS.md by maintenance (a generated block; the rest of the
-- file is the person's). Unpinning deletes the row and regenerates the block.
CREATE TABLE pinned_facts (
    fact_id TEXT PRIMARY KEY,
    pinned_at TEXT NOT NULL,
    reason TEXT NOT NULL
);

-- Revisions dreams made to topic addenda and the personality matrix: reviewable, revertible.
CREATE TABLE dream_revisions (
    id TEXT PRIMARY KEY,             -- short and stable: d-<8 hex> of (cycle, kind, target)
    cycle_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    kind TEXT NOT NULL,              -- addendum | new_topic
    target TEXT NOT NULL,            -- the topic id
    status TEXT NOT NULL,            -- applied | rejected | reverted
    reason TEXT NOT NULL DEFAULT '', -- why it was rejected (or the model's rationale)
    files TEXT NOT NULL,             -- JSON [{"path": rel, "before": text|null, "after": text}]
    diff TEXT NOT NULL,              -- unified diff of every file
    sources TEXT NOT NULL DEFAULT '[]',
    reverted_at TEXT
);
CREATE INDEX dream_revisions_created ON dream_revisions(created_at);
