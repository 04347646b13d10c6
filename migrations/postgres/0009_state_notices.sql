-- Watching across processes: a transaction that commits the state of an actor that some
-- process watches (a turn's write, or destroying the actor) notifies the channel
-- `solid_objects_state` with `[type, id, incarnation, revision]`. PostgreSQL delivers the
-- notice only after the commit (never for a transaction that rolls back), and the watchers
-- read the state.
--
-- A transaction that notifies takes a database-wide lock for its commit, so commits that
-- notify go one at a time: only the actors that are watched notify. A process that watches
-- actors over `LISTEN` keeps a row per actor here, renewed while it watches (each row
-- expires on the server's clock, so a process that died stops the notices by itself).
CREATE TABLE solid_watched (
    actor_type TEXT   NOT NULL,
    actor_id   TEXT   NOT NULL,
    -- The watching runtime's id.
    watcher    TEXT   NOT NULL,
    -- Microseconds since the epoch, on the server's clock.
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (actor_type, actor_id, watcher)
);

CREATE FUNCTION solid_notify_state() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM solid_watched w
        WHERE w.actor_type = NEW.actor_type AND w.actor_id = NEW.actor_id
          AND w.expires_at > (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT
    ) THEN
        PERFORM pg_notify(
            'solid_objects_state',
            json_build_array(NEW.actor_type, NEW.actor_id, NEW.incarnation, NEW.revision)::text
        );
    END IF;
    RETURN NULL;
END
$$;

-- A row a turn only locked (revision 0 of the first incarnation) has no state to see.
CREATE TRIGGER solid_instances_state_inserted
    AFTER INSERT ON solid_instances
    FOR EACH ROW WHEN (NEW.revision > 0 OR NEW.incarnation > 1)
    EXECUTE FUNCTION solid_notify_state();

CREATE TRIGGER solid_instances_state_updated
    AFTER UPDATE OF revision, incarnation ON solid_instances
    FOR EACH ROW WHEN (OLD.revision IS DISTINCT FROM NEW.revision
                       OR OLD.incarnation IS DISTINCT FROM NEW.incarnation)
    EXECUTE FUNCTION solid_notify_state();
