-- Effects: work outside the database that a turn asked for, run after it commits.

CREATE TABLE solid_effects (
    id           BIGSERIAL PRIMARY KEY,
    effect_id    TEXT    NOT NULL UNIQUE,
    actor_type   TEXT    NOT NULL,
    actor_id     TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    payload      TEXT    NOT NULL,
    status       TEXT    NOT NULL CHECK (status IN ('ready', 'running', 'done', 'dead')),
    attempts     BIGINT  NOT NULL DEFAULT 0,
    available_at BIGINT  NOT NULL,
    last_error   TEXT,
    created_at   BIGINT  NOT NULL,
    finished_at  BIGINT
);

-- What workers claim: ready effects by time, and running ones whose lease ran out.
CREATE INDEX solid_effects_due
    ON solid_effects (name, available_at) WHERE status IN ('ready', 'running');
