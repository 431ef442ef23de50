-- "The newest memories of a kind" runs every turn (themes, recollections, profile): serve
-- it from an index in valid-time order instead of sorting the whole kind.
CREATE INDEX memories_kind_valid ON memories(kind, coalesce(valid_from, created_at), rowid);
