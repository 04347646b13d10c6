-- The operators' charts' tallies (version 15 on every backend; SQLite's migration 15 says
-- what each part is for). The new tables are empty, so their indexes are built at once; the
-- column is added to solid_messages without rewriting it.
ALTER TABLE solid_messages ADD COLUMN IF NOT EXISTS retry_of BIGINT;

-- A dead letter that a build before this one retried names its retry (`retried_as`); the
-- retry is marked as one. It locks only the retries' rows.
UPDATE solid_messages AS retry SET retry_of = dead.id
FROM solid_messages AS dead
WHERE dead.status = 'dead' AND dead.retried_as = retry.id AND retry.retry_of IS NULL;

CREATE TABLE solid_activity (
    minute BIGINT NOT NULL,
    kind   TEXT   NOT NULL,
    bucket BIGINT NOT NULL,
    count  BIGINT NOT NULL,
    PRIMARY KEY (minute, kind, bucket)
);

CREATE TABLE solid_actor_activity (
    actor_type TEXT   NOT NULL,
    actor_id   TEXT   NOT NULL,
    minute     BIGINT NOT NULL,
    kind       TEXT   NOT NULL,
    count      BIGINT NOT NULL,
    PRIMARY KEY (actor_type, actor_id, minute, kind)
);

CREATE INDEX solid_actor_activity_minute ON solid_actor_activity (minute);

CREATE TABLE solid_activity_folded (
    id           BIGINT PRIMARY KEY CHECK (id = 1),
    folded_until BIGINT NOT NULL
);

INSERT INTO solid_activity_folded (id, folded_until) VALUES (1, 0);
