-- Wake-ups across processes (version 13, MySQL and MariaDB only: PostgreSQL has NOTIFY, and
-- SQLite's processes poll). The one row is a bell: a process that committed work rings it
-- by raising `rung`, in a statement of its own after its commit, and idle workers of every
-- process read it by primary key at a short interval. Both statements below run again
-- harmlessly after a process died between them.
CREATE TABLE IF NOT EXISTS solid_wake_ups (
    id   TINYINT NOT NULL PRIMARY KEY,
    rung BIGINT NOT NULL
) ENGINE = InnoDB;

INSERT IGNORE INTO solid_wake_ups (id, rung) VALUES (1, 0);
