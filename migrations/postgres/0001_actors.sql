-- Actors, their mailboxes and their reminders.
-- Times are microseconds since the Unix epoch, passed in by the runtime's clock.

CREATE TABLE solid_instances (
    actor_type    TEXT   NOT NULL,
    actor_id      TEXT   NOT NULL,
    state         TEXT,
    revision      BIGINT NOT NULL DEFAULT 0,
    next_sequence BIGINT NOT NULL DEFAULT 1,
    unfinished    BIGINT NOT NULL DEFAULT 0,
    updated_at    BIGINT NOT NULL,
    PRIMARY KEY (actor_type, actor_id)
);

CREATE TABLE solid_messages (
    id              BIGSERIAL PRIMARY KEY,
    actor_type      TEXT   NOT NULL,
    actor_id        TEXT   NOT NULL,
    sequence        BIGINT NOT NULL,
    operation       TEXT   NOT NULL,
    arguments       TEXT   NOT NULL,
    request_id      TEXT   NOT NULL UNIQUE,
    idempotency_key TEXT,
    status          TEXT   NOT NULL CHECK (status IN ('ready', 'completed', 'rejected', 'dead')),
    attempts        BIGINT NOT NULL DEFAULT 0,
    available_at    BIGINT NOT NULL,
    result          TEXT,
    last_error      TEXT,
    created_at      BIGINT NOT NULL,
    finished_at     BIGINT,
    UNIQUE (actor_type, actor_id, sequence)
);

-- The mailbox: an actor's ready messages in order.
CREATE INDEX solid_messages_mailbox
    ON solid_messages (actor_type, actor_id, sequence) WHERE status = 'ready';

-- The workers' view: ready messages by the time they become available.
CREATE INDEX solid_messages_available
    ON solid_messages (available_at) WHERE status = 'ready';

-- One message per actor and idempotency key.
CREATE UNIQUE INDEX solid_messages_idempotency
    ON solid_messages (actor_type, actor_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Dead letters for operators, and finished messages for the retention task.
CREATE INDEX solid_messages_finished
    ON solid_messages (status, finished_at) WHERE status <> 'ready';

CREATE TABLE solid_reminders (
    id         BIGSERIAL PRIMARY KEY,
    actor_type TEXT   NOT NULL,
    actor_id   TEXT   NOT NULL,
    name       TEXT   NOT NULL,
    key        TEXT   NOT NULL,
    due_at     BIGINT NOT NULL,
    arguments  TEXT   NOT NULL,
    UNIQUE (actor_type, actor_id, name, key)
);

CREATE INDEX solid_reminders_due ON solid_reminders (due_at, id);
