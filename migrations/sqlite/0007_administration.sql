-- Operating it (version 7 on both backends; PostgreSQL's version 6 is its wake-up).
-- An operator may pause an actor: workers skip it and callers get a typed error until it is
-- resumed. `paused_at` is when it was paused; NULL: it runs.
ALTER TABLE solid_instances ADD COLUMN paused_at INTEGER;

-- Every administration call, allowed or denied: who (the caller's context as JSON), what,
-- on which resource, when, and how it ended. An allowed call's row is written before it
-- acts ('allowed') and then says how it ended ('done' or 'failed'), so nothing it changed
-- is ever without its row; a row still 'allowed' is a call interrupted before it knew.
CREATE TABLE solid_admin_events (
    id       INTEGER PRIMARY KEY,
    at       INTEGER NOT NULL,
    caller   TEXT,
    action   TEXT    NOT NULL,
    resource TEXT    NOT NULL,
    outcome  TEXT    NOT NULL
        CHECK (outcome IN ('allowed', 'denied', 'done', 'failed')),
    details  TEXT
);

CREATE INDEX solid_admin_events_at ON solid_admin_events (at, id);

-- Dead letters by actor type and operation, for filtered listing and redrive.
CREATE INDEX solid_messages_dead
    ON solid_messages (actor_type, operation, id) WHERE status = 'dead';
