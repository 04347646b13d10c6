-- What the operators' charts read (version 11 on every backend; PostgreSQL's migration 11 says
-- why each part is there, and has a partial index of the fired reminders' messages, which
-- MySQL cannot have: here solid_messages_finished holds their due times). MySQL
-- commits each DDL statement by itself, so each change below checks the schema first and runs
-- again whole after a process died inside it. The indexes on solid_messages and
-- solid_effects, tables that grow, are index steps, each built in place on its own while
-- writes to its table go on.

-- Every failed attempt at a message, and when it failed.
CREATE TABLE IF NOT EXISTS solid_failed_attempts (
    id         BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    message_id BIGINT NOT NULL,
    actor_type VARCHAR(255) NOT NULL,
    actor_id   VARCHAR(255) NOT NULL,
    failed_at  BIGINT NOT NULL,
    KEY solid_failed_attempts_at (failed_at),
    KEY solid_failed_attempts_actor (actor_type, actor_id, failed_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- step: index
-- Finished messages by status and time, with when each was enqueued, (a fired reminder's)
-- when it was due, and by which actor.
SET @solid_ddl = IF(
    (SELECT COUNT(*) FROM information_schema.statistics
     WHERE table_schema = DATABASE() AND table_name = 'solid_messages'
       AND index_name = 'solid_messages_finished' AND column_name = 'created_at') = 0,
    'ALTER TABLE solid_messages DROP KEY solid_messages_finished,
         ADD KEY solid_messages_finished
             (status, finished_at, created_at, scheduled_for, actor_type, actor_id),
         ALGORITHM = INPLACE, LOCK = NONE',
    'DO 0');
PREPARE solid_ddl FROM @solid_ddl;
EXECUTE solid_ddl;
DEALLOCATE PREPARE solid_ddl;

-- step: index
-- Finished effects by status and time, with when each was emitted.
SET @solid_ddl = IF(
    (SELECT COUNT(*) FROM information_schema.statistics
     WHERE table_schema = DATABASE() AND table_name = 'solid_effects'
       AND index_name = 'solid_effects_finished' AND column_name = 'created_at') = 0,
    'ALTER TABLE solid_effects DROP KEY solid_effects_finished,
         ADD KEY solid_effects_finished (status, finished_at, created_at),
         ALGORITHM = INPLACE, LOCK = NONE',
    'DO 0');
PREPARE solid_ddl FROM @solid_ddl;
EXECUTE solid_ddl;
DEALLOCATE PREPARE solid_ddl;
