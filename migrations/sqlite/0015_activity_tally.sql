-- The operators' charts' tallies (version 15 on every backend): a count per minute of what
-- finished, failed, started and stopped waiting, so a window of the charts reads its
-- minutes, not the rows they hold. The workers' upkeep folds each minute that ended at
-- least two minutes ago from the rows finished in it (a turn writes no tally of its own);
-- the charts count the minutes not yet folded from the rows. What leaves no row behind is
-- tallied by the transaction that does it: a reminder deleted after it was due, and an
-- operator's retry of a dead effect. Pruned with the finished messages.

-- The dead letter an operator's retry enqueued this message for: a retried reminder's
-- message keeps its due time for its handler, and the charts count it as a message, not as
-- a reminder that fired again.
ALTER TABLE solid_messages ADD COLUMN retry_of INTEGER;

-- A dead letter that a build before this one retried names its retry (`retried_as`); the
-- retry is marked as one here, as an operator's retry is marked from now on.
UPDATE solid_messages SET retry_of = (
    SELECT dead.id FROM solid_messages AS dead
    WHERE dead.status = 'dead' AND dead.retried_as = solid_messages.id)
WHERE retry_of IS NULL
  AND id IN (SELECT retried_as FROM solid_messages WHERE status = 'dead' AND retried_as > 0);

-- The whole database's tally: per minute and kind (a status, `failed`, `message_in`,
-- `reminder_in`, `reminder_out`, `effect_in`, `effect_out`, `lateness`), the count; a
-- lateness is counted in the bucket of its milliseconds, to two significant figures.
CREATE TABLE solid_activity (
    minute INTEGER NOT NULL,
    kind   TEXT    NOT NULL,
    bucket INTEGER NOT NULL,
    count  INTEGER NOT NULL,
    PRIMARY KEY (minute, kind, bucket)
) WITHOUT ROWID;

-- Each actor's tally, for its page: completed, rejected, dead and failed per minute.
CREATE TABLE solid_actor_activity (
    actor_type TEXT    NOT NULL,
    actor_id   TEXT    NOT NULL,
    minute     INTEGER NOT NULL,
    kind       TEXT    NOT NULL,
    count      INTEGER NOT NULL,
    PRIMARY KEY (actor_type, actor_id, minute, kind)
) WITHOUT ROWID;

-- What retention deletes, by minute.
CREATE INDEX solid_actor_activity_minute ON solid_actor_activity (minute);

-- Where the upkeep's folding stands: every row that finished before `folded_until` is in the
-- tallies (0: none is yet).
CREATE TABLE solid_activity_folded (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    folded_until INTEGER NOT NULL
);

INSERT INTO solid_activity_folded (id, folded_until) VALUES (1, 0);
