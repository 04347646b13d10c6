-- What the operators' charts read (version 11 on every backend).
--
-- The indexes on solid_messages and solid_effects, tables that grow, are index steps: each
-- is built on its own, CONCURRENTLY, while writes to its table go on (a replaced index is
-- built under another name and then takes the old one's). The file read whole is the same
-- migration, as one transaction would apply it.
--
-- Every failed attempt at a message, and when it failed: a message row keeps only how many
-- attempts failed and the last error, and a chart of failures over time needs when each one
-- happened. A row is written in the failed attempt's own transaction, and pruned with the
-- finished messages.
CREATE TABLE solid_failed_attempts (
    id         BIGSERIAL PRIMARY KEY,
    message_id BIGINT  NOT NULL,
    actor_type TEXT    NOT NULL,
    actor_id   TEXT    NOT NULL,
    failed_at  BIGINT  NOT NULL
);

CREATE INDEX solid_failed_attempts_at ON solid_failed_attempts (failed_at);

CREATE INDEX solid_failed_attempts_actor
    ON solid_failed_attempts (actor_type, actor_id, failed_at);

-- step: index
-- Finished messages by status and time, with when each was enqueued and by which actor: the
-- charts count them from the index alone, an actor's too. (An index by actor would put each
-- turn's entry in its actor's part of the tree, where this one appends at its end: measured,
-- it wrote a quarter more pages per turn.)
DROP INDEX solid_messages_finished;
CREATE INDEX solid_messages_finished
    ON solid_messages (status, finished_at, created_at, actor_type, actor_id)
    WHERE status <> 'ready';

-- step: index
-- The fired reminders' finished messages by time, with when each was due and fired: how late
-- reminders ran, and how long they waited to fire.
CREATE INDEX solid_messages_reminders
    ON solid_messages (finished_at, scheduled_for, created_at, status)
    WHERE scheduled_for IS NOT NULL AND status <> 'ready';

-- step: index
-- Finished effects by status and time, with when each was emitted: for the charts and the
-- retention task.
CREATE INDEX solid_effects_finished
    ON solid_effects (status, finished_at, created_at) WHERE status IN ('done', 'dead');
