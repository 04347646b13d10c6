-- A turn's lock in one round trip: the actor's row locked (created first if missing) and the
-- head of its mailbox, read after the lock was taken.
--
-- A statement reads with one snapshot, taken when it starts; a row lock it then waits for (or
-- takes just after another transaction committed) can belong to a newer commit than that
-- snapshot, and a head read in the same statement could be stale: a message that commit
-- finished would run again, and one it enqueued would be missed. The statements of a
-- VOLATILE PL/pgSQL function each take a snapshot of their own when they run (READ
-- COMMITTED), so the head below is read after the lock and sees every commit that came before
-- it.
--
-- Arguments: the actor, whether to wait for a lock another transaction holds (otherwise no
-- row is returned then), the time (microseconds) a head must be due by unless it already
-- failed, and the version (incarnation, revision) the caller holds in memory: while the row is
-- at it, its state is not returned (NULL).
CREATE FUNCTION solid_lock_actor(
    lock_type TEXT, lock_id TEXT, wait BOOLEAN, due_by BIGINT,
    known_incarnation BIGINT, known_revision BIGINT)
RETURNS TABLE (
    state TEXT, revision BIGINT, incarnation BIGINT, state_version BIGINT, paused_at BIGINT,
    id BIGINT, operation TEXT, arguments TEXT, attempts BIGINT, available_at BIGINT,
    message_incarnation BIGINT, scheduled_for BIGINT)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    locked solid_instances%ROWTYPE;
BEGIN
    SELECT * INTO locked FROM solid_instances i
    WHERE i.actor_type = lock_type AND i.actor_id = lock_id
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- Missing, or another transaction holds it.
        IF NOT wait AND EXISTS (
            SELECT 1 FROM solid_instances i
            WHERE i.actor_type = lock_type AND i.actor_id = lock_id) THEN
            RETURN;
        END IF;
        INSERT INTO solid_instances (actor_type, actor_id, updated_at)
        VALUES (lock_type, lock_id, 0)
        ON CONFLICT ON CONSTRAINT solid_instances_pkey DO NOTHING;
        IF wait THEN
            -- Bounded by the transaction's lock_timeout and statement_timeout.
            SELECT * INTO locked FROM solid_instances i
            WHERE i.actor_type = lock_type AND i.actor_id = lock_id
            FOR UPDATE;
        ELSE
            SELECT * INTO locked FROM solid_instances i
            WHERE i.actor_type = lock_type AND i.actor_id = lock_id
            FOR UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                RETURN;
            END IF;
        END IF;
    END IF;
    RETURN QUERY
    SELECT CASE WHEN locked.incarnation = known_incarnation
                 AND locked.revision = known_revision THEN NULL ELSE locked.state END,
           locked.revision, locked.incarnation, locked.state_version, locked.paused_at,
           h.id, h.operation, h.arguments, h.attempts, h.available_at, h.incarnation,
           h.scheduled_for
    FROM (SELECT 1) AS one
    LEFT JOIN LATERAL (
        SELECT m.id, m.operation, m.arguments, m.attempts, m.available_at, m.incarnation,
               m.scheduled_for
        FROM solid_messages m
        WHERE m.actor_type = lock_type AND m.actor_id = lock_id AND m.status = 'ready'
          AND (m.attempts > 0 OR m.available_at <= due_by)
        ORDER BY m.id LIMIT 1) AS h ON TRUE;
END
$$;
