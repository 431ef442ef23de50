-- Mention links (issue 35): a name the person tied to a relation or a description in one of
-- their messages ("Jarek, my brother-in-law"; "Fergus, a friend from the running club, helped
-- us carry the piano") — the name, the phrase as said, and the message (its chunk memory and
-- message id) that said it. Written when a session's messages are chunked; read by the
-- search's link hop, so a question by relation ("what does my brother-in-law do?") also
-- searches the name. Homes from before this table are filled once, the first time the links
-- are read (kv 'memory.links_version').
CREATE TABLE mention_links (
    memory_uid TEXT NOT NULL,        -- chunk:<session>:<seq>, the message's own chunk
    name TEXT NOT NULL,              -- as written ("Jarek", "Aunt May" is not split)
    phrase TEXT NOT NULL,            -- the relation or description ("brother-in-law")
    kind TEXT NOT NULL,              -- relation | deed
    speaker TEXT NOT NULL DEFAULT '', -- who said it (an imported conversation's speaker)
    session_id TEXT NOT NULL,
    message_id TEXT NOT NULL,        -- messages.msg_id
    created_at TEXT NOT NULL,
    PRIMARY KEY (memory_uid, name, phrase)
);
CREATE INDEX mention_links_name ON mention_links(name);
