-- Shared facts keep their history (issue 25): when each held, and what ended it.
-- valid_from / invalid_from: when the fact held (invalid_from NULL: it still does).
-- superseded_by: the shared fact that replaced it (a newer value, a correction, or the one
-- copy a duplicate was folded into). retired_as: duplicate | superseded | stale | retracted |
-- corrected; retired_by: the agent schema that retired it; retired_cycle: the sleep cycle
-- that did (NULL for the person's own retraction or correction).
-- Every agent's migration runs this; `IF NOT EXISTS` makes the second agent's a no-op.
ALTER TABLE shared.facts ADD COLUMN IF NOT EXISTS valid_from TEXT;
ALTER TABLE shared.facts ADD COLUMN IF NOT EXISTS invalid_from TEXT;
ALTER TABLE shared.facts ADD COLUMN IF NOT EXISTS superseded_by BIGINT;
ALTER TABLE shared.facts ADD COLUMN IF NOT EXISTS retired_as TEXT;
ALTER TABLE shared.facts ADD COLUMN IF NOT EXISTS retired_reason TEXT;
ALTER TABLE shared.facts ADD COLUMN IF NOT EXISTS retired_by TEXT;
ALTER TABLE shared.facts ADD COLUMN IF NOT EXISTS retired_cycle TEXT;
