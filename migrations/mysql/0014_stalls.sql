-- Passes that left a ready message unrun (version 14 on every backend): its turn kept
-- conflicting with other transactions (a Galera certification failure, a deadlock), or its
-- commit kept going unanswered. Neither is a failure of the message, so neither counts an
-- attempt; this count is how an endless one still shows (the doctor reports a message past
-- a threshold). The column is added in place, without copying the table or blocking writes;
-- run again after a process died just after it, it finds the column there.
ALTER TABLE solid_messages ADD COLUMN stalls BIGINT NOT NULL DEFAULT 0, ALGORITHM = INSTANT;
