-- The whole schema, as PostgreSQL's migrations 1 to 7 leave it, in MySQL's (and MariaDB's)
-- form. Times are microseconds since the Unix epoch, passed in by the runtime's clock.
--
-- Text is utf8mb4 in a binary collation that does not pad (`utf8mb4_nopad_bin` on MariaDB,
-- `utf8mb4_0900_bin` on MySQL; the runtime names the one the server has): ids compare byte
-- for byte, so `a`, `A` and `a ` are three actors, as on the other backends. Ids and keys
-- are at most 255 bytes, so VARCHAR(255) holds them and every index fits InnoDB's 3072
-- bytes. State, arguments, results and payloads are LONGTEXT.

CREATE TABLE IF NOT EXISTS solid_instances (
    actor_type    VARCHAR(255) NOT NULL,
    actor_id      VARCHAR(255) NOT NULL,
    state         LONGTEXT,
    revision      BIGINT NOT NULL DEFAULT 0,
    incarnation   BIGINT NOT NULL DEFAULT 1,
    state_version BIGINT NOT NULL DEFAULT 1,
    updated_at    BIGINT NOT NULL,
    -- When an operator paused the actor; NULL: it runs.
    paused_at     BIGINT,
    PRIMARY KEY (actor_type, actor_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

CREATE TABLE IF NOT EXISTS solid_messages (
    id              BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    actor_type      VARCHAR(255) NOT NULL,
    actor_id        VARCHAR(255) NOT NULL,
    operation       VARCHAR(255) NOT NULL,
    arguments       LONGTEXT NOT NULL,
    request_id      VARCHAR(255) NOT NULL,
    idempotency_key VARCHAR(255),
    status          VARCHAR(16) NOT NULL,
    attempts        BIGINT NOT NULL DEFAULT 0,
    available_at    BIGINT NOT NULL,
    result          LONGTEXT,
    last_error      LONGTEXT,
    created_at      BIGINT NOT NULL,
    finished_at     BIGINT,
    -- A dead letter an operator retried names its retry.
    retried_as      BIGINT,
    -- A fired reminder's incarnation (NULL: whichever is current) and occurrence time.
    incarnation     BIGINT,
    scheduled_for   BIGINT,
    CONSTRAINT solid_messages_status_check
        CHECK (status IN ('ready', 'completed', 'rejected', 'dead', 'destroyed')),
    UNIQUE KEY solid_messages_request (request_id),
    -- One message per actor and idempotency key (NULL keys never collide).
    UNIQUE KEY solid_messages_idempotency (actor_type, actor_id, idempotency_key),
    -- The mailbox: an actor's messages by status in order; its head is the lowest ready id.
    KEY solid_messages_mailbox (actor_type, actor_id, status, id),
    -- The workers' view: ready messages, oldest first.
    KEY solid_messages_ready (status, id),
    -- Dead letters for operators, and finished messages for the retention task.
    KEY solid_messages_finished (status, finished_at),
    KEY solid_messages_dead (status, actor_type, operation, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

CREATE TABLE IF NOT EXISTS solid_reminders (
    id           BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    actor_type   VARCHAR(255) NOT NULL,
    actor_id     VARCHAR(255) NOT NULL,
    name         VARCHAR(255) NOT NULL,
    `key`        VARCHAR(255) NOT NULL,
    due_at       BIGINT NOT NULL,
    arguments    LONGTEXT NOT NULL,
    incarnation  BIGINT NOT NULL DEFAULT 1,
    -- A recurring reminder's interval, and what to do with occurrences missed while
    -- nothing ran ('latest' or 'all').
    every_micros BIGINT,
    missed       VARCHAR(16),
    -- One reminder per actor, name and key. Four 255-character columns are more than an
    -- InnoDB index holds, so the key is their digest (ids and keys hold no NUL byte).
    digest       BINARY(32) AS (UNHEX(SHA2(CONCAT_WS(CHAR(0), actor_type, actor_id, name, `key`), 256))) STORED,
    UNIQUE KEY solid_reminders_digest (digest),
    KEY solid_reminders_actor (actor_type, actor_id, name),
    KEY solid_reminders_due (due_at, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

CREATE TABLE IF NOT EXISTS solid_effects (
    id           BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    effect_id    VARCHAR(255) NOT NULL,
    actor_type   VARCHAR(255) NOT NULL,
    actor_id     VARCHAR(255) NOT NULL,
    name         VARCHAR(255) NOT NULL,
    payload      LONGTEXT NOT NULL,
    status       VARCHAR(16) NOT NULL,
    attempts     BIGINT NOT NULL DEFAULT 0,
    -- Each claim (a run, or an operator's retry) counts: a runner records its outcome only
    -- under the claim it holds.
    claims       BIGINT NOT NULL DEFAULT 0,
    available_at BIGINT NOT NULL,
    last_error   LONGTEXT,
    created_at   BIGINT NOT NULL,
    finished_at  BIGINT,
    incarnation  BIGINT NOT NULL DEFAULT 1,
    -- The commands the effect reports back to its actor with.
    on_success   VARCHAR(255),
    on_failure   VARCHAR(255),
    CONSTRAINT solid_effects_status_check
        CHECK (status IN ('ready', 'running', 'done', 'dead')),
    UNIQUE KEY solid_effects_effect (effect_id),
    -- What workers claim: ready effects by time, and running ones whose lease ran out.
    KEY solid_effects_due (name, status, available_at),
    KEY solid_effects_finished (status, finished_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- Every administration call, allowed or denied (see PostgreSQL's migration 7).
CREATE TABLE IF NOT EXISTS solid_admin_events (
    id       BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at       BIGINT NOT NULL,
    caller   LONGTEXT,
    action   VARCHAR(255) NOT NULL,
    resource LONGTEXT NOT NULL,
    outcome  VARCHAR(16) NOT NULL,
    details  LONGTEXT,
    CONSTRAINT solid_admin_events_outcome_check
        CHECK (outcome IN ('allowed', 'denied', 'done', 'failed')),
    KEY solid_admin_events_at (at, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;
