-- Each sleep cycle's change set: what consolidation changed in memory (facts mined,
-- superseded, retired, promoted; months folded), with the state before and after, so
-- `reverie sleep show` lists it and `reverie sleep revert` undoes it. A revert is itself a
-- change (kind `reverted`, target `#N` of the change it undid); nothing is deleted.
CREATE TABLE sleep_changes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    cycle_id TEXT NOT NULL,
    seq INTEGER NOT NULL,            -- N within the cycle: `reverie sleep revert ID --change N`
    at TEXT NOT NULL,
    kind TEXT NOT NULL,              -- fact_mined | fact_superseded | fact_retired | fact_promoted | month_folded | summary_folded | reverted
    target TEXT NOT NULL,            -- a fact id, a month uid, or `#N` for a revert
    before TEXT,                     -- JSON: the state the change replaced (null: nothing)
    after TEXT,                      -- JSON: the state it made
    note TEXT NOT NULL DEFAULT '',
    reverted_at TEXT,
    reverted_by INTEGER,             -- seq of the `reverted` change that undid it
    UNIQUE (cycle_id, seq),
    -- A phase re-run after a crash records the same change again: it finds the first.
    UNIQUE (cycle_id, kind, target)
);

-- Day-level memories whose fold into a month was reverted: maintenance does not fold them again.
CREATE TABLE sleep_fold_holds (
    source_uid TEXT PRIMARY KEY,
    held_at TEXT NOT NULL,
    change TEXT NOT NULL             -- cycle_id#N of the revert
);

-- Facts whose promotion into FACTS.md was reverted: not pinned again by score, only when the
-- person confirms the pin after the revert.
CREATE TABLE sleep_pin_holds (
    fact_id TEXT PRIMARY KEY,
    held_at TEXT NOT NULL,
    change TEXT NOT NULL
);
