//! The guide to solid-objects, a chapter per module: each chapter is a markdown file in the
//! crate's `guide/` folder, and every example in it runs as a doc test.
//!
//! Start with [the crate's front page](crate) for an actor and a call, then read in this order:
//!
//! | chapter | what it covers |
//! |---------|----------------|
//! | [`calls`] | the three ways to call, sends between actors, delays, idempotency keys, timeouts, the workers, and who may call |
//! | [`effects`] | work outside the database, run after the turn commits, and its outcome sent back to the actor |
//! | [`failures`] | rejections, failures and dead letters, why nothing wedges, the application's own rows in a turn, bad input |
//! | [`lifecycle`] | typed rejections, destroy and incarnations, state versions and migrations, stored arguments, recurring reminders |
//! | [`watching`] | a stream of an actor's committed states, across processes, and as server-sent events |
//! | [`testing`] | a manual clock on a temporary SQLite file, reminders and mailboxes run by hand, a database per test on a server |
//! | [`operating`] | the command-line tool, the administration API, the dashboard, metrics, a stuck actor, deploying |
//! | [`backends`] | SQLite, PostgreSQL, MySQL and MariaDB, and what each does differently |
//! | [`guarantees`] | order, delivery and durability, what is left to the application, and every default |
//! | [`performance`] | a durable turn beside the same work written by hand in SQL, measured |
//! | [`stability`] | semver, the minimum supported Rust version, and the stored formats every release keeps reading |
//!
//! The modules hold no items: they are the chapters' pages.

#[doc = include_str!("../guide/calls.md")]
pub mod calls {}

#[doc = include_str!("../guide/effects.md")]
pub mod effects {}

#[doc = include_str!("../guide/failures.md")]
pub mod failures {}

#[doc = include_str!("../guide/lifecycle.md")]
pub mod lifecycle {}

#[doc = include_str!("../guide/watching.md")]
pub mod watching {}

#[doc = include_str!("../guide/testing.md")]
pub mod testing {}

#[doc = include_str!("../guide/operating.md")]
pub mod operating {}

#[doc = include_str!("../guide/backends.md")]
pub mod backends {}

#[doc = include_str!("../guide/guarantees.md")]
pub mod guarantees {}

#[doc = include_str!("../guide/performance.md")]
pub mod performance {}

#[doc = include_str!("../guide/stability.md")]
pub mod stability {}
