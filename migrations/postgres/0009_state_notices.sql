-- Watching across processes: a transaction that commits an actor's state (a turn's write,
-- or destroying the actor) notifies the channel `solid_objects_state` with
-- `[type, id, incarnation, revision]`. PostgreSQL delivers the notice only after the commit
-- (never for a transaction that rolls back), and watchers in any process read the state.
CREATE FUNCTION solid_notify_state() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(
        'solid_objects_state',
        json_build_array(NEW.actor_type, NEW.actor_id, NEW.incarnation, NEW.revision)::text
    );
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
