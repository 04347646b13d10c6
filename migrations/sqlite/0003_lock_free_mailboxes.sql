-- Mailboxes ordered by message id. Only an actor's own turns touch its row in
-- solid_instances, so messages from other actors, fired reminders and enqueues append to a
-- mailbox without taking that actor's lock: no turn ever waits for a second actor.
-- A message enqueued without a delay is available from time 0, so a clock that steps back
-- never holds it. A dead letter that an operator retried names its retry.

CREATE TABLE solid_messages_by_id (
    id              INTEGER PRIMARY KEY,
    actor_type      TEXT    NOT NULL,
    actor_id        TEXT    NOT NULL,
    operation       TEXT    NOT NULL,
    arguments       TEXT    NOT NULL,
    request_id      TEXT    NOT NULL UNIQUE,
    idempotency_key TEXT,
    status          TEXT    NOT NULL
        CHECK (status IN ('ready', 'completed', 'rejected', 'dead', 'destroyed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    available_at    INTEGER NOT NULL,
    result          TEXT,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    finished_at     INTEGER,
    retried_as      INTEGER
);

-- Within one actor the old sequence numbers and the ids were allocated in the same order.
-- A message that was due when it was enqueued becomes available from time 0; one enqueued
-- with a delay keeps its time.
INSERT INTO solid_messages_by_id (id, actor_type, actor_id, operation, arguments, request_id,
    idempotency_key, status, attempts, available_at, result, last_error, created_at, finished_at)
SELECT id, actor_type, actor_id, operation, arguments, request_id, idempotency_key, status,
    attempts,
    CASE WHEN status = 'ready' AND attempts = 0 AND available_at <= created_at THEN 0
         ELSE available_at END,
    result,
    last_error, created_at, finished_at
FROM solid_messages;

DROP TABLE solid_messages;
ALTER TABLE solid_messages_by_id RENAME TO solid_messages;

-- The mailbox: an actor's ready messages in order; its head is the lowest id.
CREATE INDEX solid_messages_mailbox
    ON solid_messages (actor_type, actor_id, id) WHERE status = 'ready';

-- The workers' view: every ready message, oldest first.
CREATE INDEX solid_messages_ready ON solid_messages (id) WHERE status = 'ready';

-- One message per actor and idempotency key.
CREATE UNIQUE INDEX solid_messages_idempotency
    ON solid_messages (actor_type, actor_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Dead letters for operators, and finished messages for the retention task.
CREATE INDEX solid_messages_finished
    ON solid_messages (status, finished_at) WHERE status <> 'ready';

ALTER TABLE solid_instances DROP COLUMN next_sequence;
ALTER TABLE solid_instances DROP COLUMN unfinished;
