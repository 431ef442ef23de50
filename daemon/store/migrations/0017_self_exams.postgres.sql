-- The continuity self-exam (issue 34): after each sleep, questions about what the agent should
-- know are answered from the context the woken session's first turn gets. One row a cycle:
-- the score (hits / questions × 100), who worded the questions, and every item as JSON
-- (question, key words looked for, superseded values, hit | stale | miss, the layer found in).
CREATE TABLE self_exams (
    cycle_id TEXT PRIMARY KEY,       -- the sleep cycle that took it
    taken_at TEXT NOT NULL,
    score DOUBLE PRECISION NOT NULL,
    questions INTEGER NOT NULL,
    hits INTEGER NOT NULL,
    worded_by TEXT NOT NULL,         -- offline | the dreams model | offline: why not the model
    items TEXT NOT NULL              -- JSON array
);
CREATE INDEX self_exams_taken ON self_exams(taken_at);
