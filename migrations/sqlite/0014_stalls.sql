-- Passes that left a ready message unrun (version 14 on every backend): its turn kept
-- conflicting with other transactions, or its commit kept going unanswered. Neither is a
-- failure of the message, so neither counts an attempt; this count is how an endless one
-- still shows (the doctor reports a message past a threshold).
ALTER TABLE solid_messages ADD COLUMN stalls INTEGER NOT NULL DEFAULT 0;
