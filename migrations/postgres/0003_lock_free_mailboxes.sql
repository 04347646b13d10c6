-- Mailboxes ordered by message id. Only an actor's own turns touch its row in
-- solid_instances, so messages from other actors, fired reminders and enqueues append to a
-- mailbox without taking that actor's row lock: no turn ever waits for a second actor's
-- lock, so two actors sending to each other cannot deadlock.
-- A message enqueued without a delay is available from time 0, so a clock that steps back
-- never holds it. A dead letter that an operator retried names its retry.

DROP INDEX solid_messages_mailbox;
DROP INDEX solid_messages_available;

-- Dropping the column drops the unique (actor_type, actor_id, sequence) constraint with it.
ALTER TABLE solid_messages DROP COLUMN sequence;
ALTER TABLE solid_messages ADD COLUMN retried_as BIGINT;
-- A message that was due when it was enqueued becomes available from time 0; one enqueued
-- with a delay keeps its time.
UPDATE solid_messages SET available_at = 0
WHERE status = 'ready' AND attempts = 0 AND available_at <= created_at;

-- The mailbox: an actor's ready messages in order; its head is the lowest id.
CREATE INDEX solid_messages_mailbox
    ON solid_messages (actor_type, actor_id, id) WHERE status = 'ready';

-- The workers' view: every ready message, oldest first.
CREATE INDEX solid_messages_ready ON solid_messages (id) WHERE status = 'ready';

ALTER TABLE solid_instances DROP COLUMN next_sequence;
ALTER TABLE solid_instances DROP COLUMN unfinished;
