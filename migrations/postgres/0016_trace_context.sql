-- The W3C trace context of the span that caused a row (version 16 on every backend): a
-- message's, a reminder's and an effect's `traceparent`, written only by a build with the
-- `opentelemetry` feature and read back only when it is a valid one. NULL everywhere else: a
-- build without the feature neither reads nor writes it. A nullable column without a
-- default is added without rewriting the table.
ALTER TABLE solid_messages ADD COLUMN IF NOT EXISTS traceparent VARCHAR(55);
ALTER TABLE solid_reminders ADD COLUMN IF NOT EXISTS traceparent VARCHAR(55);
ALTER TABLE solid_effects ADD COLUMN IF NOT EXISTS traceparent VARCHAR(55);
