-- The daemon's runs (issue 33): when it started, when it was last known to be running, and
-- how the run ended, so the console draws the time it was not running as off instead of awake.
-- A clean stop writes stopped_at; a run the next start finds still open ended without saying
-- (killed, crashed, the machine lost power) and is closed at its last sign of life (seen_at).
-- A home that ran before this table existed gets one `unrecorded` row for that time.
CREATE TABLE daemon_runs (
    id TEXT PRIMARY KEY,
    started_at TEXT NOT NULL,
    seen_at TEXT NOT NULL,           -- the last time it was known running (written every minute)
    stopped_at TEXT,                 -- NULL while it runs
    ended TEXT                       -- NULL while it runs | stopped | lost | unrecorded
);
CREATE INDEX daemon_runs_started ON daemon_runs(started_at);
