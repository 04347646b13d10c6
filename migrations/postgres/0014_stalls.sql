-- Passes that left a ready message unrun (version 14 on every backend): its turn kept
-- conflicting with other transactions (a serialization failure, a deadlock), or its commit
-- kept going unanswered. Neither is a failure of the message, so neither counts an attempt;
-- this count is how an endless one still shows (the doctor reports a message past a
-- threshold). A column with a constant default is added without rewriting the table.
ALTER TABLE solid_messages ADD COLUMN IF NOT EXISTS stalls BIGINT NOT NULL DEFAULT 0;
