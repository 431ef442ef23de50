-- Facts mined at night, and how facts are used (issue 22).
-- fact_mining: how far the sleep cycle's mining has read each session (message seq), so a
-- night reads only what was said since, and a re-run after a crash reads nothing twice.
CREATE TABLE fact_mining (
    session_id TEXT PRIMARY KEY,
    upto_seq INTEGER NOT NULL,
    mined_at TEXT NOT NULL
);

-- A memory's uses: how often automatic recall or recall showed it, and when last; and when
-- it was last confirmed (said again). Staleness ranks by them; nothing is deleted. Counts
-- are derived, not a source of truth: a reindex starts them again from nothing.
ALTER TABLE memories ADD COLUMN last_used TEXT;
ALTER TABLE memories ADD COLUMN uses INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memories ADD COLUMN confirmed_at TEXT;
