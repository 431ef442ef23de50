-- A random identity for this database's memory index. The vector matrix persisted beside the
-- database records it, so a matrix file left over from another database (a restored or
-- recreated reverie.db) is never taken for this one's, whatever its generation says.
INSERT OR IGNORE INTO kv(key, value, updated_at)
VALUES ('memory.index_id', lower(hex(randomblob(16))), strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
