-- Each claim of an effect gets a number that never goes back (attempts do, when an operator
-- retries a dead effect): a runner records its outcome only under the claim it holds, so a
-- stale runner from before a retry cannot overwrite the retry's outcome.
ALTER TABLE solid_effects ADD COLUMN claims INTEGER NOT NULL DEFAULT 0;
