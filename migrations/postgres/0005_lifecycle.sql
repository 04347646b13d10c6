-- Actors that live for years.
-- An incarnation number per actor: destroying an actor starts the next one, and a reminder
-- (or a message it fired) of an earlier incarnation never runs on a later one.
-- The version of the stored state, for the actor's migrations.
ALTER TABLE solid_instances ADD COLUMN incarnation BIGINT NOT NULL DEFAULT 1;
ALTER TABLE solid_instances ADD COLUMN state_version BIGINT NOT NULL DEFAULT 1;

-- The incarnation a fired reminder's message belongs to (NULL: whichever is current), and
-- the time the occurrence it fired was scheduled for.
ALTER TABLE solid_messages ADD COLUMN incarnation BIGINT;
ALTER TABLE solid_messages ADD COLUMN scheduled_for BIGINT;

-- A reminder's incarnation, and for a recurring one its interval and what to do with
-- occurrences missed while nothing ran ('latest' or 'all').
ALTER TABLE solid_reminders ADD COLUMN incarnation BIGINT NOT NULL DEFAULT 1;
ALTER TABLE solid_reminders ADD COLUMN every_micros BIGINT;
ALTER TABLE solid_reminders ADD COLUMN missed TEXT;

-- The commands an effect reports back to its actor with: on success (with its output as
-- the command's one argument) and on its final failure.
ALTER TABLE solid_effects ADD COLUMN on_success TEXT;
ALTER TABLE solid_effects ADD COLUMN on_failure TEXT;
ALTER TABLE solid_effects ADD COLUMN incarnation BIGINT NOT NULL DEFAULT 1;

-- A message of a destroyed actor ends as destroyed (SQLite has this since 0003).
ALTER TABLE solid_messages DROP CONSTRAINT solid_messages_status_check;
ALTER TABLE solid_messages ADD CONSTRAINT solid_messages_status_check
    CHECK (status IN ('ready', 'completed', 'rejected', 'dead', 'destroyed'));
