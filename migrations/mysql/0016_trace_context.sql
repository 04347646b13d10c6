-- The W3C trace context of the span that caused a row (version 16 on every backend): a
-- message's, a reminder's and an effect's `traceparent`, written only by a build with the
-- `opentelemetry` feature and read back only when it is a valid one. NULL everywhere else: a
-- build without the feature neither reads nor writes it. Each column is added in place,
-- without copying the table or blocking writes; MySQL commits each DDL statement by itself,
-- so each checks the schema first and the migration runs again whole after a process died
-- inside it.

SET @solid_ddl = IF(
    (SELECT COUNT(*) FROM information_schema.columns
     WHERE table_schema = DATABASE() AND table_name = 'solid_messages'
       AND column_name = 'traceparent') = 0,
    'ALTER TABLE solid_messages ADD COLUMN traceparent VARCHAR(55), ALGORITHM = INSTANT',
    'DO 0');
PREPARE solid_ddl FROM @solid_ddl;
EXECUTE solid_ddl;
DEALLOCATE PREPARE solid_ddl;

SET @solid_ddl = IF(
    (SELECT COUNT(*) FROM information_schema.columns
     WHERE table_schema = DATABASE() AND table_name = 'solid_reminders'
       AND column_name = 'traceparent') = 0,
    'ALTER TABLE solid_reminders ADD COLUMN traceparent VARCHAR(55), ALGORITHM = INSTANT',
    'DO 0');
PREPARE solid_ddl FROM @solid_ddl;
EXECUTE solid_ddl;
DEALLOCATE PREPARE solid_ddl;

SET @solid_ddl = IF(
    (SELECT COUNT(*) FROM information_schema.columns
     WHERE table_schema = DATABASE() AND table_name = 'solid_effects'
       AND column_name = 'traceparent') = 0,
    'ALTER TABLE solid_effects ADD COLUMN traceparent VARCHAR(55), ALGORITHM = INSTANT',
    'DO 0');
PREPARE solid_ddl FROM @solid_ddl;
EXECUTE solid_ddl;
DEALLOCATE PREPARE solid_ddl;
