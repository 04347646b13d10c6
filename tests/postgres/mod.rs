//! What only PostgreSQL has: every file here pins behaviour of the PostgreSQL store alone
//! (notices, leases of watched actors, sessions and deadlines in the server), and runs only in the postgres test binary.

mod failover;
mod watch;
mod wedges;
