-- Wake-up across processes: a transaction that leaves work for the workers (a ready
-- message, a reminder scheduled or moved, an effect ready to run) notifies the channel
-- `solid_objects_work`. PostgreSQL delivers the notice after the commit, once per
-- transaction, and idle workers that LISTEN start at once instead of at their next poll.
CREATE FUNCTION solid_notify_work() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('solid_objects_work', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER solid_messages_work
    AFTER INSERT OR UPDATE OF status, available_at ON solid_messages
    FOR EACH ROW WHEN (NEW.status = 'ready') EXECUTE FUNCTION solid_notify_work();

CREATE TRIGGER solid_reminders_work
    AFTER INSERT OR UPDATE OF due_at ON solid_reminders
    FOR EACH ROW EXECUTE FUNCTION solid_notify_work();

CREATE TRIGGER solid_effects_work
    AFTER INSERT OR UPDATE OF status ON solid_effects
    FOR EACH ROW WHEN (NEW.status = 'ready') EXECUTE FUNCTION solid_notify_work();
