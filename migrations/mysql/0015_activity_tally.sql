-- The operators' charts' tallies (version 15 on every backend; SQLite's migration 15 says
-- what each part is for). MySQL commits each DDL statement by itself, so each change below
-- checks the schema first and runs again whole after a process died inside it.

-- The column is added in place, without copying the table or blocking writes.
SET @solid_ddl = IF(
    (SELECT COUNT(*) FROM information_schema.columns
     WHERE table_schema = DATABASE() AND table_name = 'solid_messages'
       AND column_name = 'retry_of') = 0,
    'ALTER TABLE solid_messages ADD COLUMN retry_of BIGINT, ALGORITHM = INSTANT',
    'DO 0');
PREPARE solid_ddl FROM @solid_ddl;
EXECUTE solid_ddl;
DEALLOCATE PREPARE solid_ddl;

-- A dead letter that a build before this one retried names its retry (`retried_as`); the
-- retry is marked as one (a rerun finds them marked). The dead letters are read first, as a
-- range of an index, so only they and their retries are locked, never the whole table.
UPDATE solid_messages AS dead STRAIGHT_JOIN solid_messages AS retry ON retry.id = dead.retried_as
SET retry.retry_of = dead.id
WHERE dead.status = 'dead' AND dead.retried_as > 0 AND retry.retry_of IS NULL;

CREATE TABLE IF NOT EXISTS solid_activity (
    minute BIGINT NOT NULL,
    kind   VARCHAR(16) NOT NULL,
    bucket BIGINT NOT NULL,
    count  BIGINT NOT NULL,
    PRIMARY KEY (minute, kind, bucket)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

CREATE TABLE IF NOT EXISTS solid_actor_activity (
    actor_type VARCHAR(255) NOT NULL,
    actor_id   VARCHAR(255) NOT NULL,
    minute     BIGINT NOT NULL,
    kind       VARCHAR(16) NOT NULL,
    count      BIGINT NOT NULL,
    PRIMARY KEY (actor_type, actor_id, minute, kind),
    KEY solid_actor_activity_minute (minute)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

CREATE TABLE IF NOT EXISTS solid_activity_folded (
    id           BIGINT NOT NULL PRIMARY KEY,
    folded_until BIGINT NOT NULL,
    CONSTRAINT solid_activity_folded_one CHECK (id = 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

INSERT IGNORE INTO solid_activity_folded (id, folded_until) VALUES (1, 0);
