-- A random identity for this database's memory index. The vector matrix persisted beside the
-- database records it, so a matrix file left over from another database (a restored or
-- recreated database) is never taken for this one's, whatever its generation says.
INSERT INTO kv(key, value, updated_at)
VALUES ('memory.index_id', replace(gen_random_uuid()::text, '-', ''),
        to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
ON CONFLICT (key) DO NOTHING;
