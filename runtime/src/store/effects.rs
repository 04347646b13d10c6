//! The statements of `solid_effects` and the traits that run them on any backend:
//! [`EffectReads`] outside a transaction, [`EffectWrites`] inside one.
//!
//! A claimed effect is leased: its `available_at` is when the lease runs out, on the clock
//! leases run on (the runtime's on SQLite, the server's on PostgreSQL and MySQL), and its
//! `claims` count is the lease's token, which renewing, releasing and finishing check.

use std::time::Duration;

use async_trait::async_trait;

use super::activity_tallies::{add_tallies, share_fold_mark, EffectLife};
use super::dialect::PerDialect;
use super::messages::storable_text;
use super::query::{get, query, Dialect};
use super::{
    rows, ActorKey, ClaimedEffect, EffectProgress, NewEffect, PendingEffects, ReadConnections,
    WriteConnection,
};
use crate::error::Result;

/// Effects waiting to run by kind, for kinds not in the JSON array `$1`: ready ones, and
/// running ones whose lease ran out by `$2` (SQLite's lease clock, the runtime's) or by the
/// server's clock; one a handler in another process runs under a live lease is handled.
pub(crate) fn unhandled_effects(dialect: Dialect) -> &'static str {
    static UNHANDLED_EFFECTS: PerDialect = PerDialect::new(|dialect| {
        format!(
            "SELECT name, COUNT(*) AS count, MIN(created_at) AS oldest_created_at
             FROM solid_effects
             WHERE (status = 'ready' OR (status = 'running' AND available_at <= {}))
               AND name NOT IN ({})
             GROUP BY name ORDER BY name",
            dialect.lease_clock("$2"),
            dialect.json_texts("$1"),
        )
    });
    UNHANDLED_EFFECTS.get(dialect)
}

/// Stores an effect the actor's (`$2`, `$3`) turn emitted, ready at its creation `$6` (and,
/// with the trace context, the context `$10` of that turn).
pub(crate) const INSERT_EFFECT: &str = concat!(
    "INSERT INTO solid_effects (effect_id, actor_type, actor_id, name, payload, status,
         available_at, created_at, incarnation, on_success, on_failure",
    traced!(", traceparent"),
    ")
     VALUES ($1, $2, $3, $4, $5, 'ready', $6, $6, $7, $8, $9",
    traced!(", $10"),
    ")"
);

/// Claims one effect named `$1` that is due (ready at `$2`, or running with a lease that ran
/// out by the lease clock), leasing it for `$3` microseconds, and noting `$4` as the last
/// error of a lease it takes over; returns the claimed row.
///
/// On SQLite the lease clock is the runtime's, `$2`; on PostgreSQL it is the server's, and a
/// claim skips the effects another transaction holds; on MySQL, an `UPDATE` cannot read the
/// table it writes, and the effect is found ([`CLAIMABLE_EFFECT_MYSQL`]), then claimed
/// ([`CLAIM_EFFECT_MYSQL`]), then read ([`CLAIMED_EFFECT`]).
pub(crate) fn claim_effect(dialect: Dialect) -> &'static str {
    static CLAIM_EFFECT: PerDialect = PerDialect::new(|dialect| {
        let lease_clock = dialect.lease_clock("$2");
        format!(
            "UPDATE solid_effects
             SET last_error = CASE WHEN status = 'running' THEN $4
                                   ELSE last_error END,
                 status = 'running', attempts = attempts + 1, claims = claims + 1,
                 available_at = {lease_clock} + $3
             WHERE id = (
                 SELECT id FROM solid_effects
                 WHERE name = $1 AND (
                     (status = 'ready' AND available_at <= $2)
                     OR (status = 'running' AND available_at <= {lease_clock}))
                 ORDER BY available_at, id LIMIT 1{})
             RETURNING id, effect_id, actor_type, actor_id, name, payload,
                       attempts, claims, incarnation, on_success, on_failure,
                       created_at, last_error{}",
            dialect.skip_locked(),
            traced!(read "traceparent"),
        )
    });
    CLAIM_EFFECT.get(dialect)
}

/// The id of the effect named `$1` that [`claim_effect`] would claim at `$2`, locked (MySQL).
pub(crate) const CLAIMABLE_EFFECT_MYSQL: &str = "SELECT id FROM solid_effects
     WHERE name = $1 AND (
         (status = 'ready' AND available_at <= $2)
         OR (status = 'running' AND available_at <= CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)))
     ORDER BY available_at, id LIMIT 1 FOR UPDATE SKIP LOCKED";

/// Claims effect `$2`, leasing it for `$1` microseconds and noting `$3` as the last error of
/// a lease it takes over (MySQL).
///
/// MySQL assigns left to right, each seeing the ones before: `last_error` reads the status
/// before the claim.
pub(crate) const CLAIM_EFFECT_MYSQL: &str = "UPDATE solid_effects
     SET last_error = CASE WHEN status = 'running' THEN $3
                           ELSE last_error END,
         status = 'running', attempts = attempts + 1,
         claims = claims + 1, available_at = CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) + $1
     WHERE id = $2";

/// The effect `$1` as a claim returns it.
pub(crate) const CLAIMED_EFFECT: &str = concat!(
    "SELECT id, effect_id, actor_type, actor_id, name, payload,
            attempts, claims, incarnation, on_success, on_failure,
            created_at, last_error",
    traced!(read "traceparent"),
    "
     FROM solid_effects WHERE id = $1"
);

/// Extends the lease of effect `$1`, still running under claim `$4`, to `$3` microseconds
/// from now by the lease clock (`$2`, the runtime's time, is that clock on SQLite only).
pub(crate) fn renew_effect(dialect: Dialect) -> &'static str {
    static RENEW_EFFECT: PerDialect = PerDialect::new(|dialect| {
        format!(
            "UPDATE solid_effects SET available_at = {} + $3
             WHERE id = $1 AND status = 'running' AND claims = $4",
            dialect.lease_clock("$2"),
        )
    });
    RENEW_EFFECT.get(dialect)
}

/// Makes effect `$1`, still running under claim `$3`, ready again at `$2` without counting
/// its attempt.
pub(crate) const RELEASE_EFFECT: &str = "UPDATE solid_effects
     SET status = 'ready', attempts = attempts - 1, available_at = $2
     WHERE id = $1 AND status = 'running' AND claims = $3";

/// Records the attempt of effect `$5`, if still running under claim `$6`: its status `$1`,
/// `available_at` `$2`, error `$3`, finish `$4` and attempts `$7`.
pub(crate) const FINISH_EFFECT: &str = "UPDATE solid_effects
     SET status = $1, available_at = $2, last_error = $3, finished_at = $4,
         attempts = $7
     WHERE id = $5 AND status = 'running' AND claims = $6";

/// Makes dead effect `$1` ready again at `$2` with its attempts reset.
pub(crate) const REVIVE_EFFECT: &str = "UPDATE solid_effects
     SET status = 'ready', attempts = 0, available_at = $2, last_error = NULL,
         finished_at = NULL
     WHERE id = $1 AND status = 'dead'";

/// The dead effect `$1`'s emission and death, locked until commit.
fn dead_effect(dialect: Dialect) -> &'static str {
    static DEAD_EFFECT: PerDialect = PerDialect::new(|dialect| {
        format!(
            "SELECT created_at, finished_at FROM solid_effects
             WHERE id = $1 AND status = 'dead'{}",
            dialect.for_update()
        )
    });
    DEAD_EFFECT.get(dialect)
}

/// Deletes done effects that finished before `$1`.
pub(crate) const PRUNE_DONE_EFFECTS: &str =
    "DELETE FROM solid_effects WHERE status = 'done' AND finished_at < $1";

/// Deletes dead effects that died before `$1`.
pub(crate) const PRUNE_DEAD_EFFECTS: &str =
    "DELETE FROM solid_effects WHERE status = 'dead' AND finished_at < $1";

/// The error a claim records on an effect it takes over from a runner whose lease ran out:
/// what is known of that attempt.
pub(crate) const RUNNER_STOPPED: &str = "its runner stopped before it finished (its process \
    was killed, ran out of memory or lost the database) and its lease ran out";

/// A lease in microseconds, to add to the lease clock in SQL: saturated at a century, far
/// enough for any lease and far from overflowing the clock's microseconds.
pub(crate) fn lease_micros(lease: Duration) -> i64 {
    const CENTURY_MICROS: i64 = 100 * 365 * 24 * 3600 * 1_000_000;
    i64::try_from(lease.as_micros()).map_or(CENTURY_MICROS, |lease| lease.min(CENTURY_MICROS))
}

/// Reads of the effects, outside any write transaction.
#[async_trait]
pub(crate) trait EffectReads: Send + Sync {
    /// Effects waiting to run at `now` (microseconds: ready, or with a lease that ran out)
    /// whose kind is not among `handled` (a JSON array of names), by kind.
    async fn unhandled_effects(&self, handled: &str, now: i64) -> Result<Vec<PendingEffects>>;
}

#[async_trait]
impl<S: ReadConnections> EffectReads for S {
    async fn unhandled_effects(&self, handled: &str, now: i64) -> Result<Vec<PendingEffects>> {
        let dialect = self.dialect();
        let unhandled = query(unhandled_effects(dialect)).bind(handled);
        // The servers' leases run on their own clocks.
        let unhandled = match dialect {
            Dialect::Sqlite => unhandled.bind(now),
            Dialect::Postgres | Dialect::MySql => unhandled,
        };
        unhandled
            .fetch_rows(self.readers(), rows::pending_effects)
            .await
    }
}

/// A turn's and an effect runner's writes to the effects, inside a transaction.
#[async_trait]
pub(crate) trait EffectWrites: Send {
    /// Stores an effect the turn emitted, ready to run once the turn commits.
    async fn insert_effect(
        &mut self,
        actor: ActorKey<'_, '_>,
        effect: &NewEffect<'_>,
    ) -> Result<()>;

    /// Claims one effect named `name` that is due (ready at `now`, or running with a lease
    /// that ran out by the lease clock), leasing it for `lease`.
    async fn claim_effect(
        &mut self,
        name: &str,
        now: i64,
        lease: Duration,
    ) -> Result<Option<ClaimedEffect>>;

    /// Extends the lease of an effect still running under the claim `claims` to `lease`
    /// from now (by the lease clock); returns whether it is still that claim's.
    async fn renew_effect(
        &mut self,
        id: i64,
        claims: i64,
        now: i64,
        lease: Duration,
    ) -> Result<bool>;

    /// Gives back the lease of an effect still running under the claim `claims` whose
    /// runner stops before it finishes (a shutdown abandoned it): ready again at `now`, its
    /// attempt not counted; returns whether it was still that claim's.
    async fn release_effect(&mut self, id: i64, claims: i64, now: i64) -> Result<bool>;

    /// Records an effect's attempt, if it is still running under the claim `claims`;
    /// returns whether it did.
    async fn finish_effect(
        &mut self,
        id: i64,
        claims: i64,
        progress: &EffectProgress<'_>,
    ) -> Result<bool>;

    /// Makes a dead effect ready again at `now` with its attempts reset; false if it is not
    /// dead (already retried, say).
    async fn revive_effect(&mut self, id: i64, now: i64) -> Result<bool>;
}

#[async_trait]
impl<T: WriteConnection> EffectWrites for T {
    async fn insert_effect(
        &mut self,
        actor: ActorKey<'_, '_>,
        effect: &NewEffect<'_>,
    ) -> Result<()> {
        self.counters().statement();
        let insert = query(INSERT_EFFECT)
            .bind(effect.effect_id)
            .bind(actor.actor_type)
            .bind(actor.actor_id)
            .bind(effect.name)
            .bind(effect.payload)
            .bind(effect.created_at)
            .bind(effect.incarnation)
            .bind(effect.on_success)
            .bind(effect.on_failure);
        #[cfg(feature = "opentelemetry")]
        let insert = insert.bind(effect.trace.traceparent());
        insert.execute(self.on()).await?;
        Ok(())
    }

    async fn claim_effect(
        &mut self,
        name: &str,
        now: i64,
        lease: Duration,
    ) -> Result<Option<ClaimedEffect>> {
        self.counters().statement();
        let lease = lease_micros(lease);
        let claimed = match self.dialect() {
            dialect @ (Dialect::Sqlite | Dialect::Postgres) => {
                query(claim_effect(dialect))
                    .bind(name)
                    .bind(now)
                    .bind(lease)
                    .bind(RUNNER_STOPPED)
                    .fetch_optional(self.on())
                    .await?
            }
            Dialect::MySql => {
                let id: Option<i64> = query(CLAIMABLE_EFFECT_MYSQL)
                    .bind(name)
                    .bind(now)
                    .fetch_optional_scalar(self.on())
                    .await?;
                match id {
                    None => None,
                    Some(id) => {
                        self.counters().statement();
                        query(CLAIM_EFFECT_MYSQL)
                            .bind(lease)
                            .bind(id)
                            .bind(RUNNER_STOPPED)
                            .execute(self.on())
                            .await?;
                        self.counters().statement();
                        query(CLAIMED_EFFECT)
                            .bind(id)
                            .fetch_optional(self.on())
                            .await?
                    }
                }
            }
        };
        claimed.map(|row| rows::claimed_effect(&row)).transpose()
    }

    async fn renew_effect(
        &mut self,
        id: i64,
        claims: i64,
        now: i64,
        lease: Duration,
    ) -> Result<bool> {
        self.counters().statement();
        let renewed = query(renew_effect(self.dialect()))
            .bind(id)
            .bind(now)
            .bind(lease_micros(lease))
            .bind(claims)
            .execute(self.on())
            .await?;
        Ok(renewed.rows_affected == 1)
    }

    async fn release_effect(&mut self, id: i64, claims: i64, now: i64) -> Result<bool> {
        self.counters().statement();
        let released = query(RELEASE_EFFECT)
            .bind(id)
            .bind(now)
            .bind(claims)
            .execute(self.on())
            .await?;
        Ok(released.rows_affected == 1)
    }

    async fn finish_effect(
        &mut self,
        id: i64,
        claims: i64,
        progress: &EffectProgress<'_>,
    ) -> Result<bool> {
        self.counters().statement();
        let finished = query(FINISH_EFFECT)
            .bind(progress.status)
            .bind(progress.available_at)
            .bind(progress.last_error.map(storable_text))
            .bind(progress.finished_at)
            .bind(id)
            .bind(claims)
            .bind(progress.attempts)
            .execute(self.on())
            .await?;
        Ok(finished.rows_affected == 1)
    }

    async fn revive_effect(&mut self, id: i64, now: i64) -> Result<bool> {
        let dialect = self.dialect();
        // Held until commit, so no fold tallies the effect's death while this retry moves it.
        self.counters().statement();
        let mark = query(share_fold_mark(dialect))
            .fetch_optional(self.on())
            .await?
            .map(|row| get::<i64>(&row, 0))
            .transpose()?
            .unwrap_or_default();
        self.counters().statement();
        let Some(dead) = query(dead_effect(dialect))
            .bind(id)
            .fetch_optional(self.on())
            .await?
        else {
            return Ok(false);
        };
        let created_at: i64 = get(&dead, "created_at")?;
        let died_at: Option<i64> = get(&dead, "finished_at")?;
        self.counters().statement();
        let revived = query(REVIVE_EFFECT)
            .bind(id)
            .bind(now)
            .execute(self.on())
            .await?;
        if revived.rows_affected != 1 {
            return Ok(false);
        }
        let life = EffectLife {
            created_at,
            died_at: died_at.unwrap_or(now),
            retried_at: now,
        };
        add_tallies(self, &life.tallies(mark)).await?;
        Ok(true)
    }
}
