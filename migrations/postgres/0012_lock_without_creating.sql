-- A lock that never waits, not even for a row another transaction is creating (version 12).
--
-- Without waiting (`wait` false), the lock of version 10 creates a missing row, and that
-- insert waits for any other transaction that inserted the same row and has not committed
-- (another process's first call of a new actor). A turn that runs inside another call's
-- transaction must never wait there, so `wait` NULL now means: skip the actor if another
-- transaction holds it, and if its row is missing (no row is returned; the turn runs in a
-- transaction of its own, which creates the row and waits for it). `wait` true and false are
-- unchanged.
CREATE OR REPLACE FUNCTION solid_lock_actor(
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
        IF wait IS NULL THEN
            RETURN;
        END IF;
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
